-- name: ConfirmedPosition :one
-- The position cdc last confirmed for a slot, and when.
SELECT confirmed_lsn::text AS lsn, confirmed_at FROM cdc_state WHERE slot = @slot;

-- name: RecordPosition :exec
-- The position cdc is about to confirm (recorded before it is confirmed,
-- so the slot is never ahead of the record unless someone else moved it).
INSERT INTO cdc_state (slot, confirmed_lsn, confirmed_at) VALUES (@slot, CAST(sqlc.arg(lsn)::text AS pg_lsn), now())
ON CONFLICT (slot) DO UPDATE SET confirmed_lsn = excluded.confirmed_lsn, confirmed_at = excluded.confirmed_at;
