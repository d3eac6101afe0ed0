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

-- name: ForceGenericPlans :exec
-- Until the transaction ends, every statement runs on its generic plan
-- (SET LOCAL plan_cache_mode): the counts below, planned once for each
-- connection and kept.
SET LOCAL plan_cache_mode = force_generic_plan;

-- name: CountPendingCapped :one
-- The PENDING rows, counted through their partial index, at most max of
-- them. The status is a literal: a partial index needs it when the plan is
-- made (one statement per status, a parameter would not do).
SELECT count(*) FROM (SELECT 1 FROM payments WHERE status = 'PENDING' LIMIT @max) s;

-- name: CountProcessingCapped :one
-- The PROCESSING rows, as CountPendingCapped (through the lease index).
SELECT count(*) FROM (SELECT 1 FROM payments WHERE status = 'PROCESSING' LIMIT @max) s;

-- name: CountDeadLetteredCapped :one
-- The DEAD_LETTERED rows, as CountPendingCapped.
SELECT count(*) FROM (SELECT 1 FROM payments WHERE status = 'DEAD_LETTERED' LIMIT @max) s;

-- name: EstimateStatuses :many
-- The rows of each status estimated from the planner's statistics of each
-- partition (reltuples times the status's frequency): no scan at all, as
-- fresh as autovacuum's last analyze. The values and their frequencies
-- are unnested side by side, in step (as unnest(a, b) would).
SELECT s.v::text AS status, sum(s.reltuples * s.f)::bigint AS n FROM (
  SELECT c.reltuples, unnest(st.most_common_vals::text::text[]) AS v, unnest(st.most_common_freqs) AS f
  FROM pg_catalog.pg_inherits i
  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_catalog.pg_stats st ON st.schemaname = n.nspname AND st.tablename = c.relname AND st.attname = 'status' AND NOT st.inherited
  WHERE i.inhparent = 'payments'::regclass AND c.reltuples > 0) s
GROUP BY s.v;

-- name: LiveRows :one
-- How many rows the partitions of payments hold, from the statistics the
-- server updates at each commit (no scan).
SELECT coalesce(sum(t.n_live_tup), 0)::bigint AS n
FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_stat_user_tables t ON t.relid = i.inhrelid
WHERE i.inhparent = 'payments'::regclass;

-- name: Forecast :many
-- What falls due in the next 24 h (due at or before due_bound), per minute
-- and currency: a range of the sweep index (PENDING rows by run_at).
SELECT date_trunc('minute', run_at)::timestamptz AS minute, currency, count(*) AS n, sum(amount_minor)::bigint AS amount
FROM payments
WHERE status = 'PENDING' AND run_at >= date_trunc('minute', now()) AND run_at < now() + interval '24 hours'
  AND due_time <= @due_bound
GROUP BY 1, 2 ORDER BY 1;

-- name: SampleAttempts :one
-- The attempts started in (after, until]: through the BRIN on started_at,
-- joined to payment_index for the due time. Lateness is of first attempts.
SELECT count(*) FILTER (WHERE a.outcome IS NOT NULL) AS executed,
       count(*) FILTER (WHERE a.outcome = 'SUCCEEDED') AS succeeded,
       count(*) FILTER (WHERE a.outcome = 'DECLINED') AS declined,
       count(*) FILTER (WHERE a.outcome = 'RETRYABLE') AS retryable,
       count(*) FILTER (WHERE a.outcome = 'AMBIGUOUS') AS ambiguous,
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - i.due_time)) FILTER (WHERE a.attempt = 1), 0)::float8 AS lateness_p50,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - i.due_time)) FILTER (WHERE a.attempt = 1), 0)::float8 AS lateness_p99
FROM payment_attempts a JOIN payment_index i ON i.id = a.payment_id
WHERE a.started_at > @after AND a.started_at <= @until;

-- name: TenantRates :many
-- The attempts finished in (after, until] per tenant: the same BRIN range
-- as SampleAttempts, grouped by the tenant payment_index keeps (version
-- 22), the busiest first and at most max of them.
SELECT i.tenant::text AS tenant, count(*) AS n
FROM payment_attempts a JOIN payment_index i ON i.id = a.payment_id
WHERE a.started_at > @after AND a.started_at <= @until AND a.outcome IS NOT NULL AND i.tenant IS NOT NULL
GROUP BY i.tenant ORDER BY 2 DESC LIMIT @max;

-- name: CountDeadLetters :one
-- The dead letters (of reason, or all when it is empty) and their amount,
-- at most max of them, through their partial index.
SELECT count(*) AS n, coalesce(sum(amount_minor), 0)::bigint AS amount FROM (
  SELECT amount_minor FROM payments WHERE status = 'DEAD_LETTERED' AND due_time <= now() AND (@reason::text = '' OR dead_letter_reason = @reason)
  LIMIT @max) s;

-- name: TenantDeadLetters :many
-- A tenant's latest dead letters: the last 2,000 dead letters (due at or
-- before due_bound) through their index, of which the tenant's (bounded,
-- whatever the tenant). The columns are those of SearchRows.
SELECT p.id, p.payer, p.payee, p.amount_minor AS amount, p.currency, p.due_time AS due, p.status, p.attempt,
       coalesce(p.dead_letter_reason, p.failure_reason, '') AS reason, p.tenant FROM (
  SELECT * FROM payments WHERE status = 'DEAD_LETTERED' AND due_time <= now() AND due_time <= @due_bound
  ORDER BY due_time DESC, id DESC LIMIT 2000) p
WHERE p.tenant = @tenant::text ORDER BY p.due_time DESC, p.id DESC LIMIT 20;

-- name: Actions :many
-- One page of the actions: at most scan rows back from the cursor (ids
-- below before) by the primary key, of which those matching the filters
-- (an actor prefix, an action, since), at most max.
SELECT id, at, payment_id, actor, action, prev_status, new_status, reason FROM (
  SELECT * FROM payment_actions WHERE id < @before ORDER BY id DESC LIMIT @scan) s
WHERE (@actor::text = '' OR starts_with(actor, @actor)) AND (@action::text = '' OR action = @action) AND at >= @since
ORDER BY id DESC LIMIT @max;

-- name: ActionsLooked :one
-- How far back a page of actions looked: the count and least id of the
-- scan before the cursor.
SELECT count(*) AS n, min(id) AS least FROM (SELECT id FROM payment_actions WHERE id < @before ORDER BY id DESC LIMIT @scan) s;

-- name: DuesOf :one
-- The due times of ids, from payment_index: the partitions a read of them
-- needs.
SELECT coalesce(array_agg(DISTINCT due_time), '{}')::timestamptz[] AS dues FROM payment_index WHERE id = ANY(@ids::uuid[]);

-- name: OpenSelection :many
-- Pins the payments among ids (due at dues, between lo and hi: their
-- partitions only, under a generic plan too, as SearchRows) that are in
-- status (PENDING or HELD), each with its currency and attempt: with the
-- status, the attempt says it has not changed since (a claim changes it).
SELECT p.id, p.amount_minor, p.currency, p.attempt
FROM payments p
WHERE p.status = @status AND p.id = ANY(@ids::uuid[]) AND p.due_time = ANY(@dues::timestamptz[])
  AND p.due_time BETWEEN @lo AND @hi
ORDER BY p.due_time, p.id
LIMIT @max;

-- name: DeadSelection :many
-- Pins what an action will act on: the dead letters among ids (the
-- selected ones, their due times dues read first from payment_index so
-- that only their partitions are read), or with ids NULL the first max
-- matching a reason (all that match), through the dead-letter index; each
-- with its currency and its attempt, which with the status says the
-- payment has not changed since (only a claim changes the attempt, and a
-- dead letter comes back only through one).
SELECT p.id, p.amount_minor, p.currency, p.attempt
FROM payments p
WHERE p.status = 'DEAD_LETTERED' AND p.due_time <= now()
  AND (sqlc.narg(ids)::uuid[] IS NULL OR (p.id = ANY(sqlc.narg(ids)) AND p.due_time = ANY(sqlc.narg(dues)::timestamptz[])))
  AND (@reason::text = '' OR p.dead_letter_reason = @reason)
ORDER BY p.due_time, p.id
LIMIT @max;

-- name: CDCSlots :many
-- Each logical slot, how far behind the server's WAL it is (MB), and when
-- cdc last confirmed it.
SELECT s.slot_name::text AS slot, s.active,
       (coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::float8 / 1048576)::float8 AS behind_mb,
       coalesce((SELECT to_char(st.confirmed_at, 'YYYY-MM-DD HH24:MI:SS') FROM cdc_state st WHERE st.slot = s.slot_name), '')::text AS confirmed
FROM pg_catalog.pg_replication_slots s WHERE s.slot_type = 'logical' ORDER BY s.slot_name LIMIT 20;

-- name: AuditHistory :many
-- A payment's changes in the audit log, in commit order. It runs on the
-- audit database, whose audit_events has the shape of the schedule
-- database's (auditsql/0001_audit_log.sql), checked here against the latter.
SELECT committed_at, table_name, op, coalesce(status, '')::text AS status, event FROM audit_events
WHERE payment_id = @payment_id ORDER BY lsn LIMIT 500;
