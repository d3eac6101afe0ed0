-- name: SlotPosition :one
-- Where the slot stands (empty when it was never confirmed), the database
-- it decodes, and ours: a slot of another database is not ours to stream.
SELECT COALESCE(confirmed_flush_lsn::text, '')::text AS confirmed_lsn, COALESCE(database, '')::text AS slot_database,
       current_database()::text AS our_database
FROM pg_catalog.pg_replication_slots WHERE slot_name = @slot_name::text;

-- name: SlotLagBytes :one
-- How far behind the server's WAL the slot's confirmed position is.
SELECT COALESCE(pg_current_wal_lsn() - confirmed_flush_lsn, 0)::bigint AS lag
FROM pg_catalog.pg_replication_slots WHERE slot_name = @slot_name::text;

-- name: DropSlot :exec
-- A resync drops the slot that no longer continues from the record.
SELECT pg_drop_replication_slot(@slot_name);

-- name: ServerVersion :one
SELECT current_setting('server_version_num')::int AS version;

-- name: TableExists :one
SELECT (to_regclass(@table_name::text) IS NOT NULL)::bool AS present;

-- name: PublicationExists :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = @pubname::text) AS present;

-- name: PublicationHasTable :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = @pubname::text AND tablename = @table_name::text) AS present;

-- name: AttemptsRowFilter :one
-- The row filter the publication applies to payment_attempts (NULL: none).
SELECT rowfilter FROM pg_catalog.pg_publication_tables
WHERE pubname = @pubname::text AND schemaname = 'public' AND tablename = 'payment_attempts';

-- name: AttemptColumns :many
-- payment_attempts' columns, their types and which are its primary key.
SELECT a.attname::text AS name, a.atttypid::int8 AS type_oid, COALESCE(a.attnum = ANY (i.indkey), false)::bool AS key
FROM pg_catalog.pg_attribute a LEFT JOIN pg_catalog.pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = 'payment_attempts'::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;

-- name: Heartbeat :exec
-- The periodic write that keeps an idle slot moving (its commit's LSN can
-- be confirmed, so the slot never pins WAL).
INSERT INTO cdc_heartbeat (id, ts) VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET ts = now();
