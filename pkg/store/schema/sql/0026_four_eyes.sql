-- paysched schema, version 26: four eyes in every channel (issue 47).
--
-- An operator's move of a payment, from the console or from admin-api's
-- gRPC and REST alike, is a request (console_requests, whatever its
-- name): pinned to the payments, their status and attempt, decided by a
-- second identity when the policy says so, and applied by a runner. The
-- database now holds the admin role to it: its moves of a payment are
-- refused unless the transaction names (paysched.request) a request that
-- is running, not expired, approved by another identity when it needed
-- approval, of that action, and pinned to that payment at its attempt.
-- One leaked admin token, or one admin-api pod's database role, moves
-- nothing a second identity did not approve.

-- Requests expire: one not decided, or approved and not yet run, by
-- expires_at does nothing (EXPIRED). Rows made before this version never
-- expire (NULL).
ALTER TABLE console_requests ADD COLUMN expires_at timestamptz;
ALTER TABLE console_requests DROP CONSTRAINT console_requests_state_check;
ALTER TABLE console_requests ADD CONSTRAINT console_requests_state_check
    CHECK (state IN ('AWAITING_APPROVAL', 'REJECTED', 'APPROVED', 'QUEUED', 'RUNNING', 'DONE', 'EXPIRED'));
ALTER TABLE console_requests DROP CONSTRAINT console_requests_decided_check;
ALTER TABLE console_requests ADD CONSTRAINT console_requests_decided_check
    CHECK (NOT needs_approval OR state IN ('AWAITING_APPROVAL', 'EXPIRED') OR decided_by IS NOT NULL);
ALTER TABLE console_requests DROP CONSTRAINT console_requests_one_unapproved_check;
ALTER TABLE console_requests ADD CONSTRAINT console_requests_one_unapproved_check
    CHECK (needs_approval OR (cardinality(ids) = 1 AND state IN ('QUEUED', 'RUNNING', 'DONE', 'EXPIRED')));
-- A request from admin-api's API says so (the console's say 'console'):
-- the requests pages and payctl show where each came from.
ALTER TABLE console_requests ADD COLUMN via text NOT NULL DEFAULT 'console' CHECK (via IN ('console', 'api'));
CREATE INDEX console_requests_expiring_idx ON console_requests (expires_at) WHERE state IN ('AWAITING_APPROVAL', 'APPROVED', 'QUEUED');

-- The operator's action a change of a payment is, or NULL when it is no
-- operator's (a claim, an outcome, a repair).
CREATE FUNCTION paysched_operator_action(old_status text, new_status text, run_at_changed boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE old_status || '>' || new_status
    WHEN 'DEAD_LETTERED>PENDING' THEN 'REDRIVE'
    WHEN 'DEAD_LETTERED>FAILED' THEN 'RESOLVE'
    WHEN 'DEAD_LETTERED>CANCELLED' THEN 'CANCEL'
    WHEN 'PENDING>HELD' THEN 'HOLD'
    WHEN 'HELD>PENDING' THEN 'RELEASE'
    WHEN 'PENDING>CANCELLED' THEN 'CANCEL_PENDING'
    WHEN 'HELD>CANCELLED' THEN 'CANCEL_HELD'
    WHEN 'PENDING>PENDING' THEN CASE WHEN run_at_changed THEN 'RESCHEDULE' END
    WHEN 'HELD>HELD' THEN CASE WHEN run_at_changed THEN 'RESCHEDULE' END
END
$$;

-- The guard of the admin role's moves (see above). Every other role, and
-- the migrations' superuser, passes untouched: their moves are guarded by
-- paysched_guard_payment.
CREATE FUNCTION paysched_guard_operator_move() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    act text;
    req text;
    r console_requests%ROWTYPE;
    i integer;
BEGIN
    IF current_setting('is_superuser') = 'on' OR NOT pg_has_role('paysched_admin', 'MEMBER') THEN
        RETURN NEW;
    END IF;
    act := paysched_operator_action(OLD.status, NEW.status, NEW.run_at IS DISTINCT FROM OLD.run_at);
    IF act IS NULL THEN
        RETURN NEW;
    END IF;
    req := nullif(current_setting('paysched.request', true), '');
    IF req IS NULL OR req !~ '^[0-9]{1,18}$' THEN
        RAISE EXCEPTION 'paysched: % may not % payment % without a request (four eyes: an operator''s move is applied only from a request)',
            current_user, act, OLD.id
            USING ERRCODE = '42501';
    END IF;
    SELECT * INTO r FROM console_requests WHERE id = req::bigint;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'paysched: request % does not exist', req USING ERRCODE = '42501';
    END IF;
    i := array_position(r.ids, OLD.id);
    IF r.state <> 'RUNNING' OR (r.expires_at IS NOT NULL AND r.expires_at <= now())
       OR (r.needs_approval AND (r.decided_by IS NULL OR r.decided_by = r.requested_by))
       OR NOT (r.action = act OR (act = 'RESCHEDULE' AND r.action = 'RUN_NOW'))
       OR i IS NULL OR r.attempts IS NULL OR r.attempts[i] IS DISTINCT FROM OLD.attempt THEN
        RAISE EXCEPTION 'paysched: request % (%, %) does not allow % of payment % at attempt %: it must be running, unexpired, approved by a second identity when it needs it, of that action, and pinned to that payment at that attempt',
            r.id, r.action, r.state, act, OLD.id, OLD.attempt
            USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END
$$;

-- Fired only on the changes an operator makes (the engine's claims and
-- outcomes never match the WHEN: the trigger is not even called for them).
CREATE TRIGGER paysched_guard_operator_move BEFORE UPDATE ON payments
    FOR EACH ROW
    WHEN ((OLD.status IN ('DEAD_LETTERED', 'HELD') AND NEW.status IS DISTINCT FROM OLD.status)
          OR (OLD.status = 'PENDING' AND NEW.status IN ('HELD', 'CANCELLED'))
          OR (NEW.status = OLD.status AND NEW.status IN ('PENDING', 'HELD') AND NEW.run_at IS DISTINCT FROM OLD.run_at))
    EXECUTE FUNCTION paysched_guard_operator_move();

GRANT UPDATE (expires_at) ON console_requests TO paysched_admin;

-- Tenant limits: the admin role writes tenant_limits only in the
-- transaction that applies an approved request (paysched.limit_request
-- names it, decided by a second identity in this same transaction, for
-- those very values).
CREATE FUNCTION paysched_guard_tenant_limits() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    req text;
    ok boolean;
BEGIN
    IF current_setting('is_superuser') = 'on' OR NOT pg_has_role('paysched_admin', 'MEMBER') THEN
        RETURN NEW;
    END IF;
    req := nullif(current_setting('paysched.limit_request', true), '');
    IF req IS NOT NULL AND req ~ '^[0-9]{1,18}$' THEN
        SELECT true INTO ok FROM tenant_limit_requests q
        WHERE q.id = req::bigint AND q.state = 'APPLIED' AND q.decided_at = now()
          AND q.decided_by IS NOT NULL AND q.decided_by <> q.requested_by
          AND q.tenant = NEW.tenant AND q.weight = NEW.weight
          AND q.max_inflight IS NOT DISTINCT FROM NEW.max_inflight AND q.max_rate IS NOT DISTINCT FROM NEW.max_rate;
    END IF;
    IF ok IS NULL THEN
        RAISE EXCEPTION 'paysched: % may not set the limits of tenant % without an approved request (four eyes)', current_user, NEW.tenant
            USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER paysched_guard_tenant_limits BEFORE INSERT OR UPDATE ON tenant_limits
    FOR EACH ROW EXECUTE FUNCTION paysched_guard_tenant_limits();
ALTER TABLE tenant_limit_requests DROP CONSTRAINT tenant_limit_requests_state_check;
ALTER TABLE tenant_limit_requests ADD CONSTRAINT tenant_limit_requests_state_check
    CHECK (state IN ('AWAITING_APPROVAL', 'APPLIED', 'REJECTED', 'EXPIRED'));
ALTER TABLE tenant_limit_requests ADD COLUMN expires_at timestamptz;
