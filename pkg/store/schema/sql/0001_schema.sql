-- paysched schema, version 1: the schedule, the id/idempotency index and attempts.
-- Money is integer minor units (bigint) plus an ISO 4217 code: never float, never numeric.

CREATE TABLE payments (
    id            uuid        NOT NULL,
    payer         text        NOT NULL,
    payee         text        NOT NULL,
    amount_minor  bigint      NOT NULL CHECK (amount_minor > 0),
    currency      char(3)     NOT NULL,
    due_time      timestamptz NOT NULL,
    -- run_at is when the row may next be claimed: due_time at first, later
    -- moved forward by retry backoff. It is never earlier than due_time, so
    -- "due_time <= now()" is a safe partition-pruning predicate for the sweep.
    run_at        timestamptz NOT NULL,
    status        text        NOT NULL DEFAULT 'PENDING' CHECK (status IN
                  ('PENDING', 'PROCESSING', 'COMPLETED', 'FAILED', 'CANCELLED', 'DEAD_LETTERED')),
    -- attempt is the fencing token: the claim increments it, and an outcome is
    -- written only "WHERE status = 'PROCESSING' AND attempt = $claimed".
    attempt       integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    lease_until   timestamptz,
    lease_owner   text,
    last_error    text,
    dead_letter_reason text,
    gateway_ref   text,
    description   text        NOT NULL DEFAULT '',
    metadata      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (run_at >= due_time),
    PRIMARY KEY (id, due_time)
) PARTITION BY RANGE (due_time);

-- The sweep index: only PENDING rows, in claim order.
CREATE INDEX payments_sweep_idx ON payments (run_at) WHERE status = 'PENDING';
-- The reaper's index: expired leases.
CREATE INDEX payments_lease_idx ON payments (lease_until) WHERE status = 'PROCESSING';

-- payment_index is small and unpartitioned: it maps a payment id to its
-- due_time (so GET by id finds the partition), orders an actor's payments for
-- listing (seq), and holds the idempotency record scoped to (payer, key) with
-- the request fingerprint and the stored response for replays.
CREATE TABLE payment_index (
    id               uuid        PRIMARY KEY,
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    payer            text        NOT NULL,
    due_time         timestamptz NOT NULL,
    idempotency_key  text,
    request_hash     bytea,
    response         bytea,
    -- The reaper forgets keys older than the window (default 7 days),
    -- walking seq order: created_at grows with seq, so no extra index.
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (seq)
);
CREATE UNIQUE INDEX payment_index_idempotency_idx
    ON payment_index (payer, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX payment_index_list_idx ON payment_index (payer, seq DESC);

-- One row per gateway attempt; the executor writes it, never the API.
CREATE TABLE payment_attempts (
    payment_id   uuid        NOT NULL,
    attempt      integer     NOT NULL CHECK (attempt > 0),
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    gateway_key  text        NOT NULL,
    outcome      text CHECK (outcome IN ('SUCCEEDED', 'DECLINED', 'RETRYABLE', 'AMBIGUOUS')),
    gateway_ref  text,
    error        text,
    executor_id  text        NOT NULL DEFAULT '',
    PRIMARY KEY (payment_id, attempt)
);

-- paysched_ensure_partitions creates the daily partitions of payments for
-- every day in [from_day, to_day]. It is idempotent and reusable: migrations
-- call it for the horizon, and the reaper calls it to keep creating ahead.
CREATE FUNCTION paysched_ensure_partitions(from_day date, to_day date)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d date := from_day;
    created integer := 0;
    part text;
BEGIN
    -- Serialize callers (API start, reaper, migrations) so two never race to
    -- create the same partition.
    PERFORM pg_advisory_xact_lock(7202611301);
    WHILE d <= to_day LOOP
        part := format('payments_p%s', to_char(d, 'YYYYMMDD'));
        IF to_regclass(part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF payments FOR VALUES FROM (%L) TO (%L)',
                part,
                (d::timestamp AT TIME ZONE 'UTC'),
                ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            -- CDC needs whole old rows; partitions don't inherit this setting.
            EXECUTE format('ALTER TABLE %I REPLICA IDENTITY FULL', part);
            created := created + 1;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN created;
END
$$;

-- Partitions from yesterday through the 1-year horizon plus two days of slack
-- (UTC days). The API and the reaper extend this as days pass.
SELECT paysched_ensure_partitions(
    (now() AT TIME ZONE 'UTC')::date - 1,
    (now() AT TIME ZONE 'UTC')::date + 367);

-- CDC captures whole rows, so every change event carries "before" in full.
ALTER TABLE payments REPLICA IDENTITY FULL;
ALTER TABLE payment_attempts REPLICA IDENTITY FULL;
