-- The audit log's database, version 1: audit_events, apart from the
-- schedule.
--
-- The audit log lives in a database of its own (docs/DESIGN.md, "Where the
-- audit log lives"): Postgres's logical decoding skips another database's
-- WAL records before decoding them, while it fully decodes (and then drops)
-- the audit-consumer's inserts into the schedule's own database, and the
-- engine's commits wait in the walsender's queue behind them.
--
-- The same shape as the schedule database's audit_events (migrations 3, 6
-- and 7): keyed by the change, the envelope as text. Written so that it
-- also runs, harmlessly, on a database that already has the table (an
-- install pointing --audit-database-url at the schedule's own database).

CREATE TABLE IF NOT EXISTS audit_events (
    lsn          bigint      NOT NULL,
    table_name   text        NOT NULL,
    row_key      text        NOT NULL,
    op           char(1)     NOT NULL CHECK (op IN ('c', 'u', 'd', 'r')),
    payment_id   uuid,
    status       text,
    event        text        NOT NULL,
    committed_at timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (lsn, table_name, row_key)
);
CREATE INDEX IF NOT EXISTS audit_events_payment_idx ON audit_events (payment_id, lsn);

-- Append-only: the database itself refuses UPDATE, DELETE and TRUNCATE.
CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'audit_events_no_update_delete' AND tgrelid = 'audit_events'::regclass) THEN
        CREATE TRIGGER audit_events_no_update_delete BEFORE UPDATE OR DELETE ON audit_events
            FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'audit_events_no_truncate' AND tgrelid = 'audit_events'::regclass) THEN
        CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
            FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();
    END IF;
END
$$;

-- Roles are the cluster's: on the schedule's cluster they exist already
-- (0010, 0012); on a cluster of its own they are made here.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['paysched_audit', 'paysched_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO paysched_audit, paysched_admin;
-- The audit-consumer appends; its ON CONFLICT DO NOTHING reads the key.
GRANT INSERT, SELECT (lsn, table_name, row_key) ON audit_events TO paysched_audit;
-- admin-api reads a payment's history.
GRANT SELECT ON audit_events TO paysched_admin;
