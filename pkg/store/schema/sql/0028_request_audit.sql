-- paysched schema, version 28: every request's life in the audit trail
-- (issue 47). A request on payments, its approval, its rejection and its
-- expiry each write a payment_actions row per payment it pins (action
-- REQUEST_REQUESTED, REQUEST_APPROVED, REQUEST_REJECTED, REQUEST_EXPIRED;
-- the status unchanged), naming both identities: the operator actions
-- page shows them, and cdc streams them into the audit log beside the
-- moves themselves (written by the moves, as before). They are written by
-- the database, in the transaction that changes the request, so no path
-- (the console, the API, the runner's expiry) can skip them.

CREATE FUNCTION paysched_request_actions() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ev text;
    who text;
    st text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        ev := 'REQUESTED';
    ELSIF NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('APPROVED', 'REJECTED', 'EXPIRED') THEN
        ev := NEW.state;
    ELSE
        RETURN NULL;
    END IF;
    who := CASE WHEN ev IN ('APPROVED', 'REJECTED') THEN coalesce(NEW.decided_name, NEW.decided_by) ELSE coalesce(NEW.requested_name, NEW.requested_by) END;
    -- The status the request acts on (its pins say the payments were in
    -- it when requested).
    st := CASE WHEN NEW.action IN ('REDRIVE', 'RESOLVE', 'CANCEL') THEN 'DEAD_LETTERED'
               WHEN NEW.action IN ('RELEASE', 'CANCEL_HELD') THEN 'HELD' ELSE 'PENDING' END;
    INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason)
    SELECT u, 'admin:' || who, 'REQUEST_' || ev, st, st,
           format('request #%s (%s via %s) %s: requested by %s (%s)%s; %s', NEW.id, NEW.action, NEW.via, lower(ev),
                  coalesce(NEW.requested_name, NEW.requested_by), NEW.requested_by,
                  CASE WHEN NEW.decided_by IS NOT NULL THEN format(', decided by %s (%s)', coalesce(NEW.decided_name, NEW.decided_by), NEW.decided_by) ELSE '' END,
                  left(NEW.reason, 300))
    FROM unnest(NEW.ids) AS u;
    RETURN NULL;
END
$$;
CREATE TRIGGER paysched_request_actions AFTER INSERT OR UPDATE OF state ON console_requests
    FOR EACH ROW EXECUTE FUNCTION paysched_request_actions();

-- The guard of payment_actions (0012), whole, with two more rows an
-- operator may write: a request's life (only from the trigger above:
-- pg_trigger_depth() > 1, never a direct INSERT), and a reschedule's or a
-- run now's move of run_at, which leaves the status as it was (under the
-- running request that pins the payment, as 0026 checks the move itself).
CREATE OR REPLACE FUNCTION paysched_guard_action() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    cands text[];
    a text;
    req text;
BEGIN
    IF current_setting('is_superuser') = 'on' THEN
        RETURN NEW;
    END IF;
    IF NEW.actor LIKE 'admin:%' AND NEW.prev_status = NEW.new_status AND paysched_acts_as('operator') THEN
        IF NEW.action LIKE 'REQUEST\_%' AND pg_trigger_depth() > 1 THEN
            RETURN NEW;
        END IF;
        req := nullif(current_setting('paysched.request', true), '');
        IF NEW.action IN ('RESCHEDULE', 'RUN_NOW') AND NEW.prev_status IN ('PENDING', 'HELD') AND req ~ '^[0-9]{1,18}$'
           AND EXISTS (SELECT 1 FROM console_requests r WHERE r.id = req::bigint AND r.state = 'RUNNING' AND r.action = NEW.action
                       AND NEW.payment_id = ANY (r.ids)) THEN
            RETURN NEW;
        END IF;
    END IF;
    -- The actors each recorded name stands for (pkg/store's moves and
    -- repair write these names).
    cands := CASE
        WHEN NEW.actor LIKE 'admin:%' THEN ARRAY['operator']
        WHEN NEW.actor = 'reconciler' THEN ARRAY['reconciler', 'resolver']
        WHEN NEW.actor = 'gateway-webhook' THEN ARRAY['webhook']
        ELSE ARRAY[]::text[]
    END;
    FOREACH a IN ARRAY cands LOOP
        IF a = ANY (paysched_move_actors(NEW.prev_status, NEW.new_status)) AND paysched_acts_as(a) THEN
            RETURN NEW;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'paysched: % may not record an action of % (% to %)', current_user, NEW.actor, NEW.prev_status, NEW.new_status
        USING ERRCODE = '42501';
END
$$;
