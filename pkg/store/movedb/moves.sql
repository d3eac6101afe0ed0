-- name: DueTimeOf :one
-- A payment's partition key (it never changes): with it as a parameter a
-- statement about the payment plans and locks one partition, not every
-- day of the year.
SELECT due_time FROM payment_index WHERE id = @id;

-- name: TargetOf :one
-- The payer never changes and the attempt only grows, so what this reads
-- still holds for a move made after it.
SELECT payer, attempt FROM payments WHERE id = @id AND due_time = @due_time;

-- name: Move :one
-- Every non-executor transition.
--
-- Why it is safe: the row is locked and its (status, attempt) read in the
-- same statement that updates it, and the UPDATE is fenced on both. A
-- claim racing for a PENDING row either holds the lock first (this
-- statement then re-reads PROCESSING and matches nothing) or finds it
-- locked and skips it (SKIP LOCKED), then sees it no longer PENDING. An
-- executor's late outcome is fenced by status = 'PROCESSING' and finds the
-- new status. The action row is written by the same statement, so a move
-- is never unaudited. A move back to PENDING (re-drive, a resolver's "not
-- charged") sets probe_first: a dead letter may have reached the gateway,
-- so the next attempt asks it before charging, whatever the mover saw
-- earlier; a release from HELD keeps it as it was (a hold is entered from
-- PENDING, with nothing in flight, so it adds no doubt). No move here
-- clears it (a move to rest keeps it): only the executor's move out of
-- PROCESSING may, and the database's guard refuses any other (0016). An
-- operator's move also names the attempt it read before asking the
-- gateway (fence; -1: none), so a claim (and perhaps a charge) in between
-- makes it miss. A webhook's move needs a payment claimed at least once
-- (claimed_once): the engine never sent one at attempt 0 to the gateway,
-- so a charge for it is not ours to record. The UPDATE repeats due_time
-- as a value: the planner prunes its target to the payment's partition
-- only on a value it knows (cur's is not one), and an UPDATE planned over
-- every daily partition took ~100 ms of a core to plan at each webhook's
-- move.
WITH cur AS (
    SELECT p.id, p.due_time, p.status, p.attempt FROM payments p
    WHERE p.id = @id::uuid AND p.due_time = @due_time::timestamptz
      AND p.status = ANY(@from_statuses::text[])
      AND (@amount::bigint = 0 OR (p.amount_minor = @amount::bigint AND p.currency = @currency::text))
      AND (@fence::int < 0 OR p.attempt = @fence::int)
      AND (NOT @claimed_once::bool OR p.attempt > 0)
    FOR UPDATE OF p
), moved AS (
    UPDATE payments p
    SET status = @to_status::text,
        gateway_ref = COALESCE(NULLIF(@gateway_ref::text, ''), p.gateway_ref),
        retries = CASE WHEN @redrive::bool THEN 0 ELSE p.retries END,
        probes = CASE WHEN @redrive::bool THEN 0 ELSE p.probes END,
        run_at = CASE WHEN @redrive::bool THEN GREATEST(p.due_time, now()) ELSE p.run_at END,
        probe_first = p.probe_first OR (@to_status::text = 'PENDING' AND cur.status <> 'HELD'),
        dead_letter_reason = CASE WHEN @to_status::text = 'DEAD_LETTERED' THEN p.dead_letter_reason END,
        failure_reason = CASE WHEN @to_status::text = 'FAILED' THEN NULLIF(@fail_reason::text, '') END,
        releases = CASE WHEN @redrive::bool THEN 0 ELSE p.releases END,
        last_error = COALESCE(NULLIF(@last_error::text, ''), p.last_error),
        lease_until = NULL, lease_owner = NULL, updated_at = now()
    FROM cur
    WHERE p.id = cur.id AND p.due_time = @due_time::timestamptz AND p.due_time = cur.due_time AND p.status = cur.status
      AND p.attempt = cur.attempt
    RETURNING cur.status AS prev
)
INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason, run_id)
SELECT @id::uuid, @actor::text, @action::text, moved.prev, @to_status::text, @reason::text, NULLIF(@run_id::bigint, 0) FROM moved
RETURNING prev_status;

-- name: Reschedule :one
-- Moves a payment's run_at.
--
-- Why it is safe: it is Move's fence without a status change. The row is
-- locked and its (status, attempt) read in the statement that updates it,
-- and the UPDATE repeats both: a claim that holds the lock first leaves it
-- PROCESSING at the next attempt, and this matches nothing; a claim that
-- finds it locked skips it (SKIP LOCKED) and reads the new run_at after.
-- The run time never goes before the due time (the CHECK run_at >=
-- due_time would refuse it), so the row stays in its partition and every
-- sweep bound that prunes by due_time still holds. A run_at made earlier
-- appends a tenant wakeup (0018's trigger), so fair claims reach it. The
-- action row is written by the same statement. run_at NULL: now.
WITH cur AS (
    SELECT p.id, p.due_time, p.status, p.attempt FROM payments p
    WHERE p.id = @id::uuid AND p.due_time = @due_time::timestamptz AND p.status = ANY(@from_statuses::text[])
      AND p.attempt = @attempt::int
    FOR UPDATE OF p
), moved AS (
    UPDATE payments p
    SET run_at = GREATEST(p.due_time, COALESCE(sqlc.narg(run_at)::timestamptz, now())), updated_at = now()
    FROM cur
    WHERE p.id = cur.id AND p.due_time = @due_time::timestamptz AND p.due_time = cur.due_time AND p.status = cur.status
      AND p.attempt = cur.attempt
    RETURNING cur.status AS prev, p.run_at
)
INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason)
SELECT @id::uuid, @actor::text, @action::text, moved.prev, moved.prev,
       @reason::text || ' (runs at ' || to_char(moved.run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ')' FROM moved
RETURNING prev_status;

-- name: NameRequest :exec
-- Names the operator's request to the database for the rest of the
-- transaction: the admin role's guard reads it (0026).
SELECT set_config('paysched.request', @request::text, true);

-- name: DueProbes :many
-- Ambiguous dead letters whose next probe is due, and how long ago their
-- requests had all been sent (-1: unknown). Dead letters are always past
-- due, so only partitions up to now are read.
SELECT p.id, p.due_time, p.payer, p.amount_minor, p.currency, p.probes,
       coalesce(EXTRACT(epoch FROM clock_timestamp() - p.requests_sent_by)::float8, -1)::float8 AS sent_ago_s
FROM payments p
WHERE p.status = 'DEAD_LETTERED' AND p.dead_letter_reason = 'AMBIGUOUS_UNRESOLVED'
  AND p.due_time <= now() AND p.run_at <= now()
ORDER BY p.run_at LIMIT @max;

-- name: PostponeProbe :exec
-- Records an unanswered probe and schedules the next one.
--
-- Why it is safe: it moves no money and no status; it is fenced on the
-- status and the probe count, so a payment moved meanwhile is left alone.
-- run_at of a dead letter is otherwise unused: it is when the next probe
-- is due.
UPDATE payments SET probes = probes + 1, run_at = now() + make_interval(secs => @wait_s::float8), last_error = @why::text
WHERE id = @id AND due_time = @due_time
  AND status = 'DEAD_LETTERED' AND probes = @probes::int;
