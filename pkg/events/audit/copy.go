package audit

// copySQL takes the audit rows in COPY's binary format (see encodeCopy).
// Hand-built: a COPY is no statement sqlc generates, and the consumer
// encodes its rows itself, a buffer a stream, which is how a backlog of
// audit rows drains at the speed Postgres writes them. The row-by-row
// append it falls back on is auditdb/audit.sql's.
const copySQL = `COPY audit_events (lsn, table_name, row_key, op, payment_id, status, event, committed_at) FROM STDIN (FORMAT binary)`
