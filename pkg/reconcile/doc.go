// Package reconcile proves the books against the gateway: the daily run
// matches a day's settlements with the payments the engine completed and
// repairs what the gateway settled that the engine does not hold as
// COMPLETED (run.go, daily.go); the resolver settles ambiguous dead
// letters and undecided charges by asking the gateway (resolver.go); the
// receiver takes the gateway's signed webhooks (receiver.go). Every move
// goes through pkg/store, fenced and audited. docs/DESIGN.md,
// "Reconciliation".
package reconcile
