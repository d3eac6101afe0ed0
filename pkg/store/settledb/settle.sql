-- name: MatchSettled :exec
-- Pairs each charged reference (its lowest charge id) with its payment,
-- if any, among the payments due between lo and hi.
INSERT INTO matched (charge_id, reference, amount, currency, pid, due_time, status, attempt, amount_minor, pcurrency)
SELECT s.charge_id, s.reference, s.amount, s.currency, p.id, p.due_time, p.status, p.attempt,
       p.amount_minor, p.currency
FROM (SELECT DISTINCT ON (reference) * FROM settle ORDER BY reference, charge_id) s
LEFT JOIN payment_index i ON i.id = s.ref_id
LEFT JOIN payments p ON p.id = i.id AND p.due_time = i.due_time
    AND p.due_time BETWEEN sqlc.arg(lo)::timestamptz AND sqlc.arg(hi)::timestamptz;

-- name: RepairSettled :exec
-- Moves to COMPLETED every payment the gateway settled that the engine
-- does not hold as COMPLETED.
--
-- Why it is safe: each UPDATE is fenced on the (status, attempt) read in
-- matched, inside this run's transaction; a payment that moved since (an
-- executor recording its outcome, a claim) is left alone and found again
-- by the next run. An executor's late write is fenced out by status =
-- 'PROCESSING'. The action and the item are written by the same statement.
WITH upd AS (
    UPDATE payments p
    SET status = 'COMPLETED', gateway_ref = m.charge_id, dead_letter_reason = NULL, failure_reason = NULL,
        lease_until = NULL, lease_owner = NULL, updated_at = now()
    FROM matched m
    WHERE m.pid IS NOT NULL AND m.status <> 'COMPLETED' AND m.amount = m.amount_minor AND m.currency = m.pcurrency
      AND p.id = m.pid AND p.due_time = m.due_time AND p.status = m.status AND p.attempt = m.attempt
      AND p.due_time BETWEEN sqlc.arg(lo)::timestamptz AND sqlc.arg(hi)::timestamptz
    RETURNING p.id, m.status AS prev, m.charge_id, m.reference
), act AS (
    INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason, run_id)
    SELECT upd.id, 'reconciler', 'REPAIR', upd.prev, 'COMPLETED',
           'gateway settled charge ' || upd.charge_id || ' on ' || sqlc.arg(day)::text, sqlc.arg(run_id)::bigint
    FROM upd
)
INSERT INTO reconciliation_items (run_id, kind, severity, payment_id, reference, charge_ids, detail)
SELECT sqlc.arg(run_id)::bigint, 'REPAIRED', CASE WHEN upd.prev IN ('FAILED', 'CANCELLED') THEN 'CRITICAL' ELSE 'WARNING' END,
       upd.id, upd.reference, ARRAY[upd.charge_id], 'was ' || upd.prev || ', gateway settled it: now COMPLETED'
FROM upd;

-- name: CountCompleted :one
-- The engine's side: payments completed on the day, due within the
-- lookback.
SELECT count(*) FROM payments p
WHERE p.status = 'COMPLETED' AND p.due_time >= sqlc.arg(due_from)::timestamptz AND p.due_time < sqlc.arg(due_to)::timestamptz
  AND p.updated_at >= sqlc.arg(day)::timestamptz AND p.updated_at < sqlc.arg(due_to)::timestamptz;

-- name: Unsettled :many
-- The payments CountCompleted counts that the day's report does not name.
SELECT p.id, p.amount_minor, p.currency, p.payer, p.due_time FROM payments p
WHERE p.status = 'COMPLETED' AND p.due_time >= sqlc.arg(due_from)::timestamptz AND p.due_time < sqlc.arg(due_to)::timestamptz
  AND p.updated_at >= sqlc.arg(day)::timestamptz AND p.updated_at < sqlc.arg(due_to)::timestamptz
  AND NOT EXISTS (SELECT 1 FROM settle s WHERE s.ref_id = p.id);
