package payment

import (
	"fmt"
	"sort"
	"strings"
)

// Actor is who makes a move.
type Actor string

// The actors. Each is one process or caller; pkg/store has the statement
// each one runs.
const (
	// Client: the payer, through payments-api (cancel).
	Client Actor = "client"
	// Sweeper: claims due payments and releases claims an executor
	// refused untouched.
	Sweeper Actor = "sweeper"
	// Executor: records what the gateway answered, fenced by the attempt,
	// and releases claims it decided not to start (lease too short).
	Executor Actor = "executor"
	// Reaper: takes back claims whose lease expired; the next attempt asks
	// the gateway before it charges again.
	Reaper Actor = "reaper"
	// Reconciler: repairs a payment the gateway's settlement report says
	// was charged (the daily run).
	Reconciler Actor = "reconciler"
	// Webhook: the gateway's signed charge-outcome webhook.
	Webhook Actor = "webhook"
	// Resolver: asks the gateway about payments parked as ambiguous.
	Resolver Actor = "resolver"
	// Operator: an admin's re-drive, resolve or cancel of a payment at
	// rest (a dead letter, or a PENDING one waiting for its retry), and
	// the hold of a PENDING one and its release.
	Operator Actor = "operator"
)

// Move is one allowed transition: who may move a payment from one status to
// another, and why.
type Move struct {
	From, To Status
	By       Actor
	// Name is the move's name in pkg/store and in payment_actions.
	Name string
}

// Moves is the state machine: every transition any process may make. A
// status change not listed here is a bug; TestStoreMovesAreInTheTable in
// pkg/store proves that every statement there makes only these, and
// TestDiagramMatchesDesign that docs/DESIGN.md draws exactly this table.
var Moves = []Move{
	{Pending, Processing, Sweeper, "claim"},
	{Processing, Pending, Sweeper, "release"},
	{Pending, Cancelled, Client, "cancel"},
	{Processing, Completed, Executor, "succeeded"},
	{Processing, Failed, Executor, "declined"},
	{Processing, Pending, Executor, "retry"},
	{Processing, Pending, Executor, "release"},
	{Processing, DeadLettered, Executor, "dead-letter"},
	{Processing, Pending, Reaper, "expire"},
	{Pending, Completed, Reconciler, "repair"},
	{Processing, Completed, Reconciler, "repair"},
	{Failed, Completed, Reconciler, "repair"},
	{Cancelled, Completed, Reconciler, "repair"},
	{DeadLettered, Completed, Reconciler, "repair"},
	{Pending, Completed, Webhook, "webhook"},
	{Pending, Failed, Webhook, "webhook"},
	{DeadLettered, Completed, Webhook, "webhook"},
	{DeadLettered, Failed, Webhook, "webhook"},
	{DeadLettered, Completed, Resolver, "resolve-ambiguous"},
	{DeadLettered, Failed, Resolver, "resolve-ambiguous"},
	{DeadLettered, Pending, Resolver, "resolve-ambiguous"},
	{DeadLettered, Pending, Operator, "redrive"},
	{DeadLettered, Failed, Operator, "resolve"},
	{Pending, Cancelled, Operator, "cancel"},
	{DeadLettered, Cancelled, Operator, "cancel"},
	// A hold stops the sweepers from claiming a PENDING payment; only an
	// operator releases or cancels it. Gateway truth still wins: a held
	// payment whose earlier attempt charged (probe_first) is repaired.
	{Pending, Held, Operator, "hold"},
	{Held, Pending, Operator, "release"},
	{Held, Cancelled, Operator, "cancel"},
	{Held, Completed, Reconciler, "repair"},
	{Held, Completed, Webhook, "webhook"},
	{Held, Failed, Webhook, "webhook"},
}

// Allowed reports whether by may move a payment from from to to.
func Allowed(from, to Status, by Actor) bool {
	for _, m := range Moves {
		if m.From == from && m.To == to && m.By == by {
			return true
		}
	}
	return false
}

// From lists the statuses by may move a payment out of into to, in the
// order of Statuses: the From of a fenced move (pkg/store.Move).
func From(to Status, by Actor) []Status {
	var out []Status
	for _, s := range Statuses {
		if Allowed(s, to, by) {
			out = append(out, s)
		}
	}
	return out
}

// Mermaid draws Moves as a Mermaid state diagram, one edge per (from, to)
// labelled with who may make it: the diagram docs/DESIGN.md holds.
func Mermaid() string {
	type edge struct{ from, to Status }
	who := map[edge][]string{}
	var edges []edge
	for _, m := range Moves {
		e := edge{m.From, m.To}
		if _, ok := who[e]; !ok {
			edges = append(edges, e)
		}
		label := string(m.By) + ": " + m.Name
		if !contains(who[e], label) {
			who[e] = append(who[e], label)
		}
	}
	rank := map[Status]int{}
	for i, s := range Statuses {
		rank[s] = i
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if rank[edges[i].from] != rank[edges[j].from] {
			return rank[edges[i].from] < rank[edges[j].from]
		}
		return rank[edges[i].to] < rank[edges[j].to]
	})
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	fmt.Fprintf(&b, "    [*] --> %s: create\n", Pending)
	for _, e := range edges {
		fmt.Fprintf(&b, "    %s --> %s: %s\n", e.from, e.to, strings.Join(who[e], ", "))
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
