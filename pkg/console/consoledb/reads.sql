-- name: Heartbeats :many
-- Each engine process heard from in the last hour.
SELECT process, info::text AS info, seen_at FROM engine_heartbeats
WHERE seen_at > now() - interval '1 hour' ORDER BY process LIMIT 50;

-- name: Buckets :many
-- The pacing buckets, the gateway's first.
SELECT name, tokens, refreshed_at FROM rate_buckets ORDER BY name = 'gateway' DESC, refreshed_at DESC LIMIT 20;

-- name: PaymentExtra :one
-- What the payment page shows beyond payment.Payment, by primary key.
SELECT coalesce(dead_letter_reason, '')::text AS dead_letter_reason, probes FROM payments WHERE id = @id AND due_time = @due_time;

-- name: PaymentActions :many
-- A payment's moves outside the execution path, oldest first.
SELECT at, actor, action, prev_status, new_status, reason FROM payment_actions
WHERE payment_id = @payment_id ORDER BY id LIMIT 200;

-- name: PaymentWebhooks :many
-- The gateway webhooks received about a payment (its charge key is its id).
SELECT event_id, received_at FROM webhook_events WHERE charge_key = @charge_key ORDER BY received_at LIMIT 100;

-- name: ReconRuns :many
-- The latest 60 reconciliation runs.
SELECT id, day, triggered_by, state, started_at, finished_at, charges, payments, repaired, mismatches, error
FROM reconciliation_runs ORDER BY id DESC LIMIT 60;

-- name: ReconKinds :many
-- The runs' findings counted by kind.
SELECT run_id, kind, count(*) AS n FROM reconciliation_items WHERE run_id = ANY(@run_ids::bigint[]) GROUP BY 1, 2;

-- name: BreakerChanges :many
-- The breakers' last day of changes, newest first.
SELECT at, process, open FROM breaker_changes WHERE at > now() - interval '24 hours' ORDER BY at DESC LIMIT 100;

-- name: ReconItems :many
-- A run's findings, at most max (the export's cap).
SELECT kind, severity, coalesce(payment_id::text, '')::text AS payment_id, reference, charge_ids, detail
FROM reconciliation_items WHERE run_id = @run_id LIMIT @max;

-- name: LimitRequests :many
-- A tenant's latest 20 changes of its limits.
SELECT id, weight, max_inflight, max_rate, reason, state, requested_by, requested_name,
       coalesce(decided_name, '')::text AS decided_name, requested_at
FROM tenant_limit_requests WHERE tenant = @tenant ORDER BY id DESC LIMIT 20;
