-- paysched schema, version 5: reconciliation, dead-letter operations and
-- the trail of every transition made by something other than an executor.

-- payment_actions records who moved a payment outside the execution path
-- (an operator's re-drive or resolve, a reconciliation repair, a webhook, the
-- ambiguity resolver), when, from which status, and why. It is written in the
-- transaction of the transition itself and is published to CDC, so each
-- action also reaches Kafka and audit_events.
CREATE TABLE payment_actions (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id  uuid        NOT NULL,
    actor       text        NOT NULL,
    action      text        NOT NULL,
    prev_status text        NOT NULL,
    new_status  text        NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    run_id      bigint,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payment_actions_payment_idx ON payment_actions (payment_id, id);
CREATE TRIGGER payment_actions_no_update_delete BEFORE UPDATE OR DELETE ON payment_actions
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER payment_actions_no_truncate BEFORE TRUNCATE ON payment_actions
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();

-- One row per reconciliation run of a UTC day; counts are final when
-- finished_at is set.
CREATE TABLE reconciliation_runs (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    day         date        NOT NULL,
    triggered_by text       NOT NULL,
    state       text        NOT NULL DEFAULT 'RUNNING' CHECK (state IN ('RUNNING', 'SUCCEEDED', 'FAILED')),
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    charges     bigint      NOT NULL DEFAULT 0,
    payments    bigint      NOT NULL DEFAULT 0,
    repaired    integer     NOT NULL DEFAULT 0,
    mismatches  integer     NOT NULL DEFAULT 0,
    error       text        NOT NULL DEFAULT ''
);
CREATE INDEX reconciliation_runs_day_idx ON reconciliation_runs (day, id);

-- What a run found. kind: REPAIRED, MISSING_AT_GATEWAY, AMOUNT_MISMATCH,
-- DUPLICATE_CHARGE, UNKNOWN_CHARGE.
CREATE TABLE reconciliation_items (
    run_id     bigint NOT NULL REFERENCES reconciliation_runs (id),
    kind       text   NOT NULL,
    severity   text   NOT NULL,
    payment_id uuid,
    reference  text   NOT NULL,
    charge_ids text[] NOT NULL DEFAULT '{}',
    detail     text   NOT NULL DEFAULT ''
);
CREATE INDEX reconciliation_items_run_idx ON reconciliation_items (run_id);

-- Gateway webhook deliveries already applied: a duplicate delivery finds
-- its id here and changes nothing.
CREATE TABLE webhook_events (
    event_id    text        PRIMARY KEY,
    charge_key  text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- probes counts GetCharge probes of a payment dead-lettered as ambiguous;
-- run_at (otherwise unused once dead-lettered) is when the next one is due.
ALTER TABLE payments ADD COLUMN probes integer NOT NULL DEFAULT 0;
-- Dead letters are few: partial indexes keep listing and probing them cheap.
CREATE INDEX payments_dead_letter_idx ON payments (due_time, id) WHERE status = 'DEAD_LETTERED';
CREATE INDEX payments_dead_probe_idx ON payments (run_at) WHERE status = 'DEAD_LETTERED';
