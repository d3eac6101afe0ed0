-- paysched schema, version 14: the operator console (admin-api /console/).
--
-- The console searches without scanning the schedule: every search is a
-- keyset walk of one index. payment_index is insert-only (but for the
-- reaper forgetting keys), so its indexes cost one entry per payment,
-- where an index on payments would gain one per status change.
ALTER TABLE payment_index ADD COLUMN payee text;
-- Rows made before this version learn their payee once, here.
UPDATE payment_index i SET payee = p.payee FROM payments p WHERE p.id = i.id AND p.due_time = i.due_time;
CREATE INDEX payment_index_payee_due ON payment_index (payee, due_time, id) WHERE payee IS NOT NULL;
CREATE INDEX payment_index_due ON payment_index (due_time, id);
-- The overview samples executed/s and lateness by attempt start: a BRIN
-- costs almost nothing to keep (attempts arrive in start order).
CREATE INDEX payment_attempts_started_brin ON payment_attempts USING brin (started_at);
-- A payment's page lists the webhooks received for it (charge_key is its
-- idempotency key: the payment id).
CREATE INDEX webhook_events_charge_key_idx ON webhook_events (charge_key);

-- An operator's action on dead letters as the console runs it: one or many
-- payments, waiting for a second operator's approval when it moves money
-- on more than one payment or above the approval amount, then run in the
-- background with its progress here.
CREATE TABLE console_requests (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action        text        NOT NULL CHECK (action IN ('REDRIVE', 'RESOLVE', 'CANCEL')),
    -- ids: the payments it acts on, fixed when it is requested (what the
    -- requester counted is what the approver approves).
    ids           uuid[]      NOT NULL CHECK (cardinality(ids) BETWEEN 1 AND 10000),
    filter        text        NOT NULL DEFAULT '',
    amount_total  bigint      NOT NULL DEFAULT 0,
    amount_max    bigint      NOT NULL DEFAULT 0,
    reason        text        NOT NULL CHECK (reason <> '' AND length(reason) <= 500),
    requested_by  text        NOT NULL,
    requested_at  timestamptz NOT NULL DEFAULT now(),
    needs_approval boolean    NOT NULL,
    decided_by    text,
    decided_at    timestamptz,
    -- AWAITING_APPROVAL -> APPROVED (or REJECTED) -> RUNNING -> DONE.
    state         text        NOT NULL CHECK (state IN ('AWAITING_APPROVAL', 'REJECTED', 'APPROVED', 'RUNNING', 'DONE')),
    done          integer     NOT NULL DEFAULT 0,
    failed        integer     NOT NULL DEFAULT 0,
    -- the last refusals, "<payment id>: <why>", at most 50
    errors        text[]      NOT NULL DEFAULT '{}',
    runner        text,
    heartbeat_at  timestamptz,
    finished_at   timestamptz,
    -- Four eyes, in the database too: whoever requested may not decide.
    CHECK (decided_by IS NULL OR decided_by <> requested_by)
);
CREATE INDEX console_requests_open_idx ON console_requests (id) WHERE state IN ('AWAITING_APPROVAL', 'APPROVED', 'RUNNING');

-- What each sweeper last reported, for the overview: its breaker and the
-- executors it is connected to (upserted every few seconds).
CREATE TABLE engine_heartbeats (
    process text        PRIMARY KEY CHECK (length(process) <= 200),
    kind    text        NOT NULL,
    info    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    seen_at timestamptz NOT NULL DEFAULT now()
);
-- Each breaker opening and closing, for the gateway page's history.
CREATE TABLE breaker_changes (
    at      timestamptz NOT NULL DEFAULT now(),
    process text        NOT NULL,
    open    boolean     NOT NULL
);
CREATE INDEX breaker_changes_at_idx ON breaker_changes (at);

GRANT SELECT, INSERT ON console_requests TO paysched_admin;
GRANT UPDATE (state, decided_by, decided_at, done, failed, errors, runner, heartbeat_at, finished_at)
    ON console_requests TO paysched_admin;
GRANT SELECT, INSERT ON engine_heartbeats TO paysched_sweeper;
GRANT UPDATE (kind, info, seen_at) ON engine_heartbeats TO paysched_sweeper;
GRANT INSERT ON breaker_changes TO paysched_sweeper;
GRANT SELECT ON engine_heartbeats, breaker_changes, rate_buckets, cdc_state, cdc_heartbeat TO paysched_admin;
GRANT SELECT ON payment_actions TO paysched_admin;
