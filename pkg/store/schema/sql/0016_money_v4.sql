-- paysched schema, version 16: money and guards v4 (issue 32).
--
-- The guard on payments (0012, 0015) checked a status change against
-- payment.Moves and kept probe_first from being cleared on an open payment.
-- It let a role clear probe_first on a dead letter (status unchanged) and
-- then move the dead letter back to PENDING: its next claim charged without
-- asking the gateway, a second charge once the PSP forgot the key. It let a
-- payer's cancel (a compromised payments-api) end a payment an attempt may
-- have charged, and the sweeper's and the reaper's moves back to PENDING
-- forget that an attempt may have reached the gateway. And an insert was
-- bounded in its status and counters only: not in run_at, the lease or the
-- tenant.

-- The sweeper's release now sets probe_first (see releaseSQL in
-- pkg/store/claim.go): it needs the column, on the parent and on every
-- partition (a statement naming a partition is checked against the
-- partition's privileges).
GRANT UPDATE (probe_first) ON payments TO paysched_sweeper;
CREATE OR REPLACE FUNCTION paysched_grant_partition(part text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT SELECT ON %I TO paysched_sweeper, paysched_executor, paysched_admin', part);
    EXECUTE format('GRANT UPDATE (status, lease_until, lease_owner, attempt, probe_first, updated_at) ON %I TO paysched_sweeper', part);
    EXECUTE format('GRANT UPDATE (status, run_at, retries, probe_first, gateway_ref, last_error, dead_letter_reason,'
                   ' lease_until, lease_owner, updated_at, releases, failure_reason, attempt_outcome, attempt_started_at,'
                   ' attempt_error, attempt_ref, attempt_executor) ON %I TO paysched_executor', part);
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_grant_partition(text) FROM PUBLIC;
SELECT paysched_grant_partition(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'payments'::regclass;

-- The guard, whole. prev_status and the attempt columns are kept first,
-- whoever updates (0015): they are the record's, not a check.
CREATE OR REPLACE FUNCTION paysched_guard_payment() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.prev_status := NULL;
        NEW.attempt_outcome := NULL; NEW.attempt_started_at := NULL; NEW.attempt_error := NULL;
        NEW.attempt_ref := NULL; NEW.attempt_executor := NULL;
    ELSE
        NEW.prev_status := OLD.status;
        -- The attempt columns describe the attempt this change records, and
        -- no later change's: an update that records no new attempt clears
        -- them (a recorded attempt has its own started_at).
        IF NEW.attempt_started_at IS NOT DISTINCT FROM OLD.attempt_started_at THEN
            NEW.attempt_outcome := NULL; NEW.attempt_started_at := NULL; NEW.attempt_error := NULL;
            NEW.attempt_ref := NULL; NEW.attempt_executor := NULL;
        END IF;
    END IF;
    IF current_setting('is_superuser') = 'on' THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' THEN
        -- Only the API creates, and only a payment nothing has touched:
        -- claimable at its due time and no sooner or later, leased by
        -- nobody, no budget spent, nothing heard from the gateway, and
        -- scheduled for a tenant that is a name (the token's claim or the
        -- payer: never empty, at most 256 bytes, as auth checks).
        IF NOT paysched_acts_as('client') OR NEW.status <> 'PENDING' OR NEW.attempt <> 0 OR NEW.probe_first
           OR NEW.retries <> 0 OR NEW.probes <> 0 OR NEW.releases <> 0 OR NEW.gateway_ref IS NOT NULL
           OR NEW.run_at IS DISTINCT FROM NEW.due_time
           OR NEW.lease_until IS NOT NULL OR NEW.lease_owner IS NOT NULL
           OR NEW.last_error IS NOT NULL OR NEW.dead_letter_reason IS NOT NULL OR NEW.failure_reason IS NOT NULL
           OR NEW.tenant = '' OR octet_length(NEW.tenant) > 256 THEN
            RAISE EXCEPTION 'paysched: % may not create payment % as % (a new payment is PENDING at its due time, untouched, with a tenant)',
                current_user, NEW.id, NEW.status
                USING ERRCODE = '42501';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND NOT paysched_may_move(OLD.status, NEW.status) THEN
        RAISE EXCEPTION 'paysched: % may not move payment % from % to % (payment.Moves)', current_user, OLD.id, OLD.status, NEW.status
            USING ERRCODE = '42501';
    END IF;
    -- probe_first says an earlier attempt may have charged the payment. It
    -- goes from true to false only in the executor's move out of
    -- PROCESSING, made after the gateway proved no charge (or answered
    -- one), whatever the status: cleared anywhere else (a dead letter, a
    -- payment at rest, an open one) the doubt is lost, and a move back to
    -- PENDING later charges without asking.
    IF OLD.probe_first AND NOT NEW.probe_first
       AND NOT (OLD.status = 'PROCESSING' AND NEW.status IS DISTINCT FROM 'PROCESSING' AND paysched_acts_as('executor')) THEN
        RAISE EXCEPTION 'paysched: % may not clear probe_first of payment % (% to %): only the executor''s move out of PROCESSING does',
            current_user, OLD.id, OLD.status, NEW.status
            USING ERRCODE = '42501';
    END IF;
    -- A move back to PENDING by anyone but the executor asks first: the
    -- sweeper's release and the reaper's expiry take back a claim that may
    -- have been dispatched, a re-drive or the resolver's requeue a dead
    -- letter that may have been charged. Only the executor knows what its
    -- attempt did.
    IF NEW.status = 'PENDING' AND OLD.status IS DISTINCT FROM 'PENDING' AND NOT NEW.probe_first
       AND NOT (OLD.status = 'PROCESSING' AND paysched_acts_as('executor')) THEN
        RAISE EXCEPTION 'paysched: % may not move payment % from % to PENDING without probe_first', current_user, OLD.id, OLD.status
            USING ERRCODE = '42501';
    END IF;
    -- A payer's cancel answers "not charged": never while an attempt may
    -- have charged. An operator's cancel asks the gateway first (admin-api).
    IF OLD.status = 'PENDING' AND NEW.status = 'CANCELLED' AND OLD.probe_first AND NOT paysched_acts_as('operator') THEN
        RAISE EXCEPTION 'paysched: % may not cancel payment %: an attempt may have charged it (probe_first)', current_user, OLD.id
            USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END
$$;
-- The triggers of 0012 and 0015 stay as they are: paysched_guard_move's
-- WHEN covers every change checked above (a status change, probe_first
-- cleared), a stale prev_status and attempt columns set or to clear.

-- A console request pins each payment's attempt when it is requested: the
-- approver approves those dead letters as they were, and the runner skips
-- (and counts) any that changed since, a re-driven one above all (PENDING
-- again: cancelling it is not what was approved). Requests made before
-- this version have no attempts and are run as before.
ALTER TABLE console_requests ADD COLUMN attempts integer[]
    CHECK (attempts IS NULL OR cardinality(attempts) = cardinality(ids));
ALTER TABLE console_requests ADD COLUMN skipped integer NOT NULL DEFAULT 0;
GRANT UPDATE (skipped) ON console_requests TO paysched_admin;

-- Four eyes in the console (issue 32, item 6).
--
-- Who: requested_by and decided_by now hold the operator's identity (the
-- identity provider's issuer and subject, "dev:<name>" for the local
-- login), which the CHECK above compares; the names shown are apart and
-- never compared.
ALTER TABLE console_requests ADD COLUMN requested_name text, ADD COLUMN decided_name text;
UPDATE console_requests SET requested_name = requested_by, decided_name = decided_by;
-- How much, per currency: {"EUR": 12000, ...} in minor units. An
-- operator's single actions are totalled per currency over a window (one
-- currency's amounts are never added to another's).
ALTER TABLE console_requests ADD COLUMN amounts jsonb NOT NULL DEFAULT '{}'::jsonb;
CREATE INDEX console_requests_unapproved_idx ON console_requests (requested_by, requested_at) WHERE NOT needs_approval;
-- A request that needs no approval is QUEUED, never APPROVED: APPROVED
-- means a second operator approved it.
UPDATE console_requests SET state = 'QUEUED' WHERE state = 'APPROVED' AND decided_by IS NULL;
ALTER TABLE console_requests DROP CONSTRAINT console_requests_state_check;
ALTER TABLE console_requests ADD CONSTRAINT console_requests_state_check
    CHECK (state IN ('AWAITING_APPROVAL', 'REJECTED', 'APPROVED', 'QUEUED', 'RUNNING', 'DONE'));
-- Four eyes, in the database too: no APPROVED without its decider; a
-- request that needed approval is decided, run or done only with one; only
-- a request on one payment may go without approval, and then it is never
-- awaiting, approved or rejected.
ALTER TABLE console_requests ADD CONSTRAINT console_requests_approved_by_check
    CHECK (state <> 'APPROVED' OR decided_by IS NOT NULL);
ALTER TABLE console_requests ADD CONSTRAINT console_requests_decided_check
    CHECK (NOT needs_approval OR state = 'AWAITING_APPROVAL' OR decided_by IS NOT NULL);
ALTER TABLE console_requests ADD CONSTRAINT console_requests_one_unapproved_check
    CHECK (needs_approval OR (cardinality(ids) = 1 AND state IN ('QUEUED', 'RUNNING', 'DONE')));
GRANT UPDATE (decided_name) ON console_requests TO paysched_admin;

-- Console sessions, server-side: the cookie names one, and every page
-- reads it, so logout and an admin's revoke end it at once on every
-- replica, and its role is the one last read from the identity provider
-- (refreshed every minute through the provider's refresh token, sealed
-- with the session key).
CREATE TABLE console_sessions (
    id          text        PRIMARY KEY,
    operator    text        NOT NULL,
    name        text        NOT NULL,
    role        text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    via         text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    checked_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    revoked_by  text,
    refresh     bytea
);
CREATE INDEX console_sessions_operator_idx ON console_sessions (operator) WHERE revoked_at IS NULL;
GRANT SELECT, INSERT, DELETE ON console_sessions TO paysched_admin;
GRANT UPDATE (name, role, checked_at, revoked_at, revoked_by, refresh) ON console_sessions TO paysched_admin;
