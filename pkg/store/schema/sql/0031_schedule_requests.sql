-- paysched schema, version 31: an operator's pause, resume or cancel of a
-- payer's recurring schedule takes a second admin (issues 44 and 47). A
-- pause and a cancel withdraw the occurrences made ahead (their PENDING
-- payments are cancelled) and a resume makes them again, so each is a
-- money move. The operator asks (admin-api: the console, payctl or the
-- API), a second identity approves, and payments-api's planner, whose
-- role is the one that changes schedules, applies what was approved at
-- its next pass, naming both in the schedule's event. The admin role
-- cannot change a schedule itself (it has no grant on schedules but
-- SELECT), nor mark a request applied; payments-api's cannot approve one.
CREATE TABLE schedule_requests (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action          text        NOT NULL CHECK (action IN ('PAUSE', 'RESUME', 'CANCEL')),
    schedule_id     uuid        NOT NULL REFERENCES schedules (id),
    -- A PAUSE's end, when it names one.
    resume_at       timestamptz,
    reason          text        NOT NULL CHECK (reason <> '' AND length(reason) <= 500),
    requested_by    text        NOT NULL,
    requested_name  text        NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now(),
    state           text        NOT NULL DEFAULT 'AWAITING_APPROVAL'
                                CHECK (state IN ('AWAITING_APPROVAL', 'APPROVED', 'APPLIED', 'NOT_APPLIED', 'REJECTED', 'EXPIRED')),
    decided_by      text,
    decided_name    text,
    decided_at      timestamptz,
    expires_at      timestamptz NOT NULL,
    -- What the application did: when, the occurrences it withdrew, or why
    -- it did not apply (NOT_APPLIED: the schedule had moved meanwhile).
    applied_at      timestamptz,
    withdrawn       integer,
    error           text,
    CHECK (action = 'PAUSE' OR resume_at IS NULL),
    -- Four eyes, in the database too.
    CHECK (decided_by IS NULL OR decided_by <> requested_by),
    CHECK (state IN ('AWAITING_APPROVAL', 'EXPIRED') OR decided_by IS NOT NULL)
);
CREATE INDEX schedule_requests_approved_idx ON schedule_requests (id) WHERE state = 'APPROVED';
CREATE INDEX schedule_requests_schedule_idx ON schedule_requests (schedule_id, id);

-- Each role moves a request only along its own edges: admin-api decides
-- one awaiting approval, before it expires; payments-api applies an
-- approved one; either expires one undecided or unapplied at its end. Nothing else changes a
-- request, and its decision is never rewritten.
CREATE FUNCTION paysched_guard_schedule_request() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('is_superuser') = 'on' THEN
        RETURN NEW;
    END IF;
    IF (NEW.action, NEW.schedule_id, NEW.resume_at, NEW.reason, NEW.requested_by, NEW.requested_name, NEW.requested_at, NEW.expires_at)
       IS DISTINCT FROM (OLD.action, OLD.schedule_id, OLD.resume_at, OLD.reason, OLD.requested_by, OLD.requested_name, OLD.requested_at, OLD.expires_at) THEN
        RAISE EXCEPTION 'a schedule request''s ask is never rewritten' USING ERRCODE = '42501';
    END IF;
    IF OLD.state = 'AWAITING_APPROVAL' AND NEW.state IN ('APPROVED', 'REJECTED') AND paysched_acts_as('operator')
       AND OLD.expires_at > now() THEN
        RETURN NEW;
    END IF;
    -- Undecided, or approved and not applied, by its end: it does nothing.
    IF OLD.state IN ('AWAITING_APPROVAL', 'APPROVED') AND NEW.state = 'EXPIRED' AND OLD.expires_at <= now()
       AND (NEW.decided_by, NEW.decided_name, NEW.decided_at) IS NOT DISTINCT FROM (OLD.decided_by, OLD.decided_name, OLD.decided_at)
       AND (NEW.applied_at, NEW.withdrawn, NEW.error) IS NOT DISTINCT FROM (OLD.applied_at, OLD.withdrawn, OLD.error) THEN
        RETURN NEW;
    END IF;
    IF OLD.state = 'APPROVED' AND NEW.state IN ('APPLIED', 'NOT_APPLIED') AND paysched_acts_as('client')
       AND (NEW.decided_by, NEW.decided_name, NEW.decided_at) IS NOT DISTINCT FROM (OLD.decided_by, OLD.decided_name, OLD.decided_at) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'schedule request %: % to % is not this role''s move', OLD.id, OLD.state, NEW.state USING ERRCODE = '42501';
END
$$;
CREATE TRIGGER paysched_guard_schedule_request BEFORE UPDATE ON schedule_requests
    FOR EACH ROW EXECUTE FUNCTION paysched_guard_schedule_request();

-- The admin role asks: only the ask's columns, so a request starts
-- AWAITING_APPROVAL and undecided, whatever the INSERT says; and it may
-- wait for at most 30 days (the policy's longest).
ALTER TABLE schedule_requests ADD CHECK (expires_at <= requested_at + interval '30 days');
GRANT SELECT ON schedule_requests TO paysched_admin;
GRANT INSERT (action, schedule_id, resume_at, reason, requested_by, requested_name, expires_at) ON schedule_requests TO paysched_admin;
GRANT UPDATE (state, decided_by, decided_name, decided_at) ON schedule_requests TO paysched_admin;
GRANT SELECT, UPDATE (state, applied_at, withdrawn, error) ON schedule_requests TO paysched_api;
