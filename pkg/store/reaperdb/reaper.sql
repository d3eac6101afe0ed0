-- name: ExpireLeases :one
-- Takes back claims whose lease expired: each goes back to PENDING with
-- probe_first set and one retry spent, and its attempt is recorded as
-- ABANDONED.
--
-- Why it is safe: every claim is dispatched to an executor, so an expired
-- one may have reached the gateway. The next attempt therefore asks the
-- gateway (GetCharge) before it charges again, and a cancel is refused
-- while probe_first is set. The retry budget is not judged here: the
-- executor alone applies payment.Backoff when it next claims the payment
-- (a spent budget is dead-lettered after the probe, as RETRIES_EXHAUSTED
-- only when the gateway says it was not charged). The update is fenced on
-- (status, attempt) of the rows locked here, so a late executor outcome
-- either lands first (and this skips the row) or is fenced out. An
-- executor's real outcome later replaces the ABANDONED row.
--
-- bound limits due_time (the day ahead of the caller's clock): only a
-- payment already due can be PROCESSING, and with the bound a custom plan
-- leaves out, at plan time, the year of partitions still to come. It must
-- not be tighter than the database's clock, or a claim of its last
-- seconds would wait for the next pass.
WITH expired AS (
    SELECT p.id, p.due_time, p.attempt
    FROM payments p
    WHERE p.status = 'PROCESSING' AND p.lease_until < now() AND p.due_time <= @bound
    ORDER BY p.lease_until
    LIMIT @batch
    FOR UPDATE OF p SKIP LOCKED
), moved AS (
    UPDATE payments p
    SET status = 'PENDING', retries = p.retries + 1, probe_first = true,
        run_at = GREATEST(p.run_at, now()),
        last_error = 'lease expired: the attempt may have reached the gateway',
        lease_until = NULL, lease_owner = NULL, updated_at = now()
    FROM expired e
    WHERE p.id = e.id AND p.due_time = e.due_time AND p.status = 'PROCESSING' AND p.attempt = e.attempt
      AND p.due_time <= @bound
    RETURNING p.id, p.attempt
), abandoned AS (
    INSERT INTO payment_attempts (payment_id, attempt, started_at, finished_at, gateway_key, outcome, error)
    SELECT m.id, m.attempt, now(), now(), m.id::text, 'ABANDONED', 'lease expired'
    FROM moved m
    ON CONFLICT (payment_id, attempt) DO NOTHING
)
SELECT count(*) FROM moved;

-- name: OldestDueAge :one
-- How long the oldest due PENDING payment has waited, in seconds (0 when
-- none): the first entry of the sweep index.
SELECT COALESCE(EXTRACT(epoch FROM now() - min(run_at)), 0)::float8 AS age_s
FROM payments WHERE status = 'PENDING' AND run_at <= now() AND due_time <= now() AND due_time <= @bound;

-- name: Overdue :one
-- Whether a payment due more than by ago is still unclaimed: the sweep's
-- own partial index, stopping at the first row.
SELECT EXISTS (
    SELECT 1 FROM payments
    WHERE status = 'PENDING' AND run_at <= now() - @by::interval AND due_time <= now() AND due_time <= @bound);

-- name: CountSchedule :one
-- Every due and every PROCESSING row: ~250 ms of a database core at a
-- spike of a million, so callers space it out.
SELECT (SELECT count(*) FROM payments d WHERE d.status = 'PENDING' AND d.run_at <= now() AND d.due_time <= now() AND d.due_time <= @bound) AS backlog,
       (SELECT count(*) FROM payments c WHERE c.lease_until IS NOT NULL AND c.status = 'PROCESSING' AND c.due_time <= @bound) AS processing;

-- name: ExpireKeys :one
-- Forgets the idempotency records of a batch of payment_index rows after
-- seq after created before cutoff, walking seq order (created_at grows
-- with seq, so no extra index). It returns how many were old and the
-- highest seq among them (after, when none). The payment is kept; its
-- key may be used again.
WITH page AS (
    SELECT x.seq, x.created_at FROM payment_index x
    WHERE x.seq > @after::bigint ORDER BY x.seq LIMIT @batch::int
), old AS (
    SELECT page.seq FROM page WHERE page.created_at < @cutoff::timestamptz
), forgot AS (
    UPDATE payment_index i SET idempotency_key = NULL, request_hash = NULL, response = NULL
    FROM old o WHERE i.seq = o.seq AND i.idempotency_key IS NOT NULL
)
SELECT count(*) AS n, coalesce(max(old.seq), @after::bigint)::bigint AS top FROM old;
