-- paysched schema, version 3: the append-only audit log built from CDC.

-- One row per captured change. (lsn, table_name, row_key) identifies a change
-- exactly, so a redelivered event inserts nothing.
CREATE TABLE audit_events (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lsn          bigint      NOT NULL,
    table_name   text        NOT NULL,
    row_key      text        NOT NULL,
    op           char(1)     NOT NULL CHECK (op IN ('c', 'u', 'd', 'r')),
    payment_id   uuid,
    status       text,
    -- json, not jsonb: stored as received (cheaper to write, exact bytes kept).
    event        json        NOT NULL,
    committed_at timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (lsn, table_name, row_key)
);
CREATE INDEX audit_events_payment_idx ON audit_events (payment_id, lsn);

-- Append-only: the database itself refuses UPDATE, DELETE and TRUNCATE.
CREATE FUNCTION audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_no_update_delete BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();
