-- name: LastSucceeded :one
-- When the last successful run finished (no row: none yet; one run a day).
SELECT finished_at FROM reconciliation_runs WHERE state = @state AND finished_at IS NOT NULL
ORDER BY finished_at DESC LIMIT 1;

-- name: RecordWebhookEvent :execrows
-- A gateway webhook seen once: a redelivery inserts nothing.
INSERT INTO webhook_events (event_id, charge_key) VALUES (@event_id, @charge_key) ON CONFLICT DO NOTHING;

-- name: LockDay :exec
-- One run of a day at a time, across reconcilers: a session lock, held
-- for the run.
SELECT pg_advisory_lock(7420, @day_key::int);

-- name: TryLockDay :one
SELECT pg_try_advisory_lock(7420, @day_key::int);

-- name: UnlockDay :exec
SELECT pg_advisory_unlock(7420, @day_key::int);

-- name: StartRun :one
INSERT INTO reconciliation_runs (day, triggered_by) VALUES (@day, @triggered_by) RETURNING id, started_at;

-- name: FinishRun :one
-- A run's outcome: recorded even when its context ended, so a run never
-- stays RUNNING.
UPDATE reconciliation_runs SET state = @state, finished_at = now(), charges = @charges, payments = @payments,
       repaired = @repaired, mismatches = @mismatches, error = @error
WHERE id = @id RETURNING finished_at;

-- name: RecordItem :exec
INSERT INTO reconciliation_items (run_id, kind, severity, payment_id, reference, charge_ids, detail)
VALUES (@run_id, @kind, @severity, NULLIF(@payment_id::text, '')::uuid, @reference, @charge_ids, @detail);

-- name: CountItems :many
SELECT kind, count(*) AS n FROM reconciliation_items WHERE run_id = @run_id GROUP BY kind;

-- name: LoadItems :many
-- A run's items, the most severe first, at most max.
SELECT kind, severity, COALESCE(payment_id::text, '')::text AS payment_id, reference, charge_ids, detail
FROM reconciliation_items WHERE run_id = @run_id ORDER BY severity = 'CRITICAL' DESC, kind, reference LIMIT @max;

-- name: ListRuns :many
-- Runs, newest first, of one day (NULL: all), before a run id (0: from
-- the newest).
SELECT id, day, triggered_by, state, started_at, finished_at, charges, payments, repaired, mismatches, error
FROM reconciliation_runs WHERE (sqlc.narg(day)::date IS NULL OR day = sqlc.narg(day)::date) AND (@before::bigint = 0 OR id < @before::bigint)
ORDER BY id DESC LIMIT @max;
