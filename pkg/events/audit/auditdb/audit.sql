-- name: AppendAuditRows :exec
-- Appends audit rows; ON CONFLICT makes a redelivered change a no-op. An
-- empty payment id or status is none (NULL).
INSERT INTO audit_events (lsn, table_name, row_key, op, payment_id, status, event, committed_at)
SELECT unnest(@lsns::bigint[]), unnest(@table_names::text[]), unnest(@row_keys::text[]), unnest(@ops::text[]),
       NULLIF(unnest(@payment_ids::text[]), '')::uuid, NULLIF(unnest(@statuses::text[]), ''),
       unnest(@events::text[]), unnest(@committed_at::timestamptz[])
ON CONFLICT (lsn, table_name, row_key) DO NOTHING;
