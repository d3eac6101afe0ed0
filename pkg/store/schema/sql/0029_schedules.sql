-- paysched schema, version 29: recurring schedules (issue 44). A schedule
-- is a payment plan: the payment's fields, an RRULE from a local start in
-- an IANA zone, a month-end policy, a business-day convention on a
-- holiday calendar and a catch-up policy (pkg/recurrence reads them). Its
-- occurrences are ordinary payments, made ahead within a horizon by the
-- planner (a loop of every payments-api replica): each carries its
-- schedule_id and its occurrence key, the nominal local date and time, and
-- schedule_occurrences holds each key once, so two planners, or one
-- crashed mid-batch and run again, make no second payment of it.

CREATE TABLE schedules (
    id              uuid        PRIMARY KEY,
    -- Orders a payer's schedules for listing (newest has the highest).
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    tenant          text        NOT NULL DEFAULT '',
    payer           text        NOT NULL,
    payee           text        NOT NULL,
    amount_minor    bigint      NOT NULL CHECK (amount_minor > 0),
    currency        text        NOT NULL,
    description     text        NOT NULL DEFAULT '',
    metadata        jsonb       NOT NULL DEFAULT '{}',
    rrule           text        NOT NULL,
    -- The first occurrence's local date and time (YYYY-MM-DDTHH:MM:SS)
    -- in time_zone: never an instant, so a tzdata change moves the
    -- charge, not the plan.
    start_local     text        NOT NULL,
    time_zone       text        NOT NULL,
    month_end       text        NOT NULL DEFAULT 'CLAMP' CHECK (month_end IN ('CLAMP', 'SKIP')),
    business_days   text        NOT NULL DEFAULT 'NONE'
                    CHECK (business_days IN ('NONE', 'FOLLOWING', 'MODIFIED_FOLLOWING', 'PRECEDING')),
    calendar        text        NOT NULL DEFAULT '',
    catch_up        text        NOT NULL DEFAULT 'SKIP_MISSED' CHECK (catch_up IN ('SKIP_MISSED', 'LATEST_ONLY', 'ALL')),
    catch_up_bound  integer     NOT NULL DEFAULT 12 CHECK (catch_up_bound > 0),
    state           text        NOT NULL DEFAULT 'ACTIVE' CHECK (state IN ('ACTIVE', 'PAUSED', 'ENDED', 'CANCELLED')),
    -- A pause may name when it ends: the planner resumes it then.
    resume_at       timestamptz,
    -- The planner's place: the last occurrence made (its key and its
    -- index, which COUNT counts), and the instant the next one falls due
    -- (NULL once the rule has no more).
    last_occurrence text,
    last_index      integer     NOT NULL DEFAULT 0,
    next_at         timestamptz,
    idempotency_key text,
    request_hash    bytea,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX schedules_idempotency_idx ON schedules (payer, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The planner's scan: active schedules by when their next occurrence
-- falls due, and paused ones by when they resume.
CREATE INDEX schedules_plan_idx ON schedules (next_at) WHERE state = 'ACTIVE';
CREATE INDEX schedules_resume_idx ON schedules (resume_at) WHERE state = 'PAUSED';
CREATE INDEX schedules_payer_idx ON schedules (payer, seq DESC);

-- One row per occurrence made: its key is the schedule and the nominal
-- local date and time, never the shifted date or the instant.
CREATE TABLE schedule_occurrences (
    schedule_id uuid        NOT NULL REFERENCES schedules (id),
    occurrence  text        NOT NULL,
    -- Its index in the rule (COUNT counts these).
    idx         integer     NOT NULL,
    payment_id  uuid        NOT NULL,
    due_time    timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, occurrence)
);

-- A pause or a cancel withdraws the occurrences made ahead and not yet
-- due: their PENDING payments are cancelled (fenced as the payer's cancel
-- is: a claimed one goes ahead) and their keys released, so a resume makes
-- them again. The key rows are found by schedule and due time.
CREATE INDEX schedule_occurrences_due_idx ON schedule_occurrences (schedule_id, due_time);

-- Occurrence payments say which plan made them (NULL: a one-off).
ALTER TABLE payments ADD COLUMN schedule_id uuid, ADD COLUMN occurrence text;

-- payments-api creates and changes the payer's schedules, and its planner
-- makes their occurrences (as the client: the payment guard lets only the
-- client create payments). The console reads them.
GRANT SELECT, INSERT, UPDATE ON schedules TO paysched_api;
GRANT SELECT, INSERT, DELETE ON schedule_occurrences TO paysched_api;
GRANT SELECT ON schedules, schedule_occurrences TO paysched_admin;
