-- name: ClearReport :exec
-- A session's earlier run may have left rows in its temporary tables.
TRUNCATE settle, matched;

-- name: IndexReport :exec
-- After the copy (an index kept up during it would slow the copy down).
CREATE INDEX IF NOT EXISTS settle_ref_id ON settle (ref_id);

-- name: AnalyzeReport :exec
-- The joins below are planned on the report's real size.
ANALYZE settle;

-- name: DropReport :exec
DROP TABLE IF EXISTS settle, matched;

-- name: ReportRange :one
-- The due-time range of the payments the report names: it lets the joins
-- prune payments' partitions. named is 0 when no charge names a payment
-- (lo and hi are then the database's now, and mean nothing).
SELECT count(*) AS named, COALESCE(min(i.due_time), now())::timestamptz AS lo,
       COALESCE(max(i.due_time), now())::timestamptz AS hi
FROM settle s JOIN payment_index i ON i.id = s.ref_id;

-- name: RecordDuplicates :exec
-- A reference settled more than once: the gateway charged it twice.
INSERT INTO reconciliation_items (run_id, kind, severity, payment_id, reference, charge_ids, detail)
SELECT @run_id, 'DUPLICATE_CHARGE', 'CRITICAL', min(ref_id::text)::uuid, reference, array_agg(charge_id ORDER BY charge_id),
       count(*) || ' settled charges for one payment'
FROM settle GROUP BY reference HAVING count(*) > 1;

-- name: RecordUnknown :exec
-- A settled charge that names no payment of ours.
INSERT INTO reconciliation_items (run_id, kind, severity, payment_id, reference, charge_ids, detail)
SELECT @run_id, 'UNKNOWN_CHARGE', 'CRITICAL', NULL, reference, ARRAY[charge_id], 'settled charge with no payment'
FROM matched WHERE pid IS NULL;

-- name: RecordAmountMismatches :exec
-- A settled charge whose amount or currency is not its payment's.
INSERT INTO reconciliation_items (run_id, kind, severity, payment_id, reference, charge_ids, detail)
SELECT @run_id, 'AMOUNT_MISMATCH', 'CRITICAL', pid, reference, ARRAY[charge_id],
       format('gateway %s %s, payment %s %s', amount, currency, amount_minor, pcurrency)
FROM matched WHERE pid IS NOT NULL AND (amount <> amount_minor OR currency <> pcurrency);
