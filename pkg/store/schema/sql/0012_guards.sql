-- paysched schema, version 12: the database itself enforces who may move
-- a payment where, admin-api gets a role of its own, and the partition
-- upkeep that runs with the owner's rights checks its arguments.
--
-- Column grants (0010, 0011) say which columns a role may write; they
-- cannot say which values. A compromised payments-api could otherwise set
-- any payment COMPLETED, move one back to PENDING without probe_first, or
-- write an admin's payment_actions row. Here a trigger checks every change
-- of a payment's status against payment.Moves (pkg/payment/moves.go) for
-- the actors the caller's role acts as, and every payment_actions row
-- against its actor. Superusers are exempt (they could drop the trigger
-- anyway), and so is nothing else: the owner's migrations move no
-- payment.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'paysched_admin') THEN
        CREATE ROLE paysched_admin NOLOGIN;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO paysched_admin;

-- The actors that may move a payment from one status to another: exactly
-- pkg/payment.Moves (TestDatabaseMovesAreTheGoMoves compares them).
CREATE FUNCTION paysched_move_actors(from_status text, to_status text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE from_status || '>' || to_status
    WHEN 'PENDING>PROCESSING' THEN ARRAY['sweeper']
    WHEN 'PENDING>COMPLETED' THEN ARRAY['reconciler', 'webhook']
    WHEN 'PENDING>FAILED' THEN ARRAY['webhook']
    WHEN 'PENDING>CANCELLED' THEN ARRAY['client', 'operator']
    WHEN 'PROCESSING>PENDING' THEN ARRAY['sweeper', 'executor', 'reaper']
    WHEN 'PROCESSING>COMPLETED' THEN ARRAY['executor', 'reconciler']
    WHEN 'PROCESSING>FAILED' THEN ARRAY['executor']
    WHEN 'PROCESSING>DEAD_LETTERED' THEN ARRAY['executor']
    WHEN 'FAILED>COMPLETED' THEN ARRAY['reconciler']
    WHEN 'CANCELLED>COMPLETED' THEN ARRAY['reconciler']
    WHEN 'DEAD_LETTERED>PENDING' THEN ARRAY['resolver', 'operator']
    WHEN 'DEAD_LETTERED>COMPLETED' THEN ARRAY['reconciler', 'webhook', 'resolver']
    WHEN 'DEAD_LETTERED>FAILED' THEN ARRAY['webhook', 'resolver', 'operator']
    WHEN 'DEAD_LETTERED>CANCELLED' THEN ARRAY['operator']
    ELSE ARRAY[]::text[]
END
$$;

-- Whether the current role acts as actor, from its group roles: each
-- service's login user is a member of one. An operator's reconciliation
-- run repairs as the reconciler does, so admin-api acts as both.
CREATE FUNCTION paysched_acts_as(actor text) RETURNS boolean
LANGUAGE sql STABLE AS $$
SELECT CASE actor
    WHEN 'client' THEN pg_has_role('paysched_api', 'MEMBER')
    WHEN 'sweeper' THEN pg_has_role('paysched_sweeper', 'MEMBER')
    WHEN 'executor' THEN pg_has_role('paysched_executor', 'MEMBER')
    WHEN 'reaper' THEN pg_has_role('paysched_reaper', 'MEMBER')
    WHEN 'reconciler' THEN pg_has_role('paysched_reconciler', 'MEMBER') OR pg_has_role('paysched_admin', 'MEMBER')
    WHEN 'webhook' THEN pg_has_role('paysched_reconciler', 'MEMBER')
    WHEN 'resolver' THEN pg_has_role('paysched_reconciler', 'MEMBER')
    WHEN 'operator' THEN pg_has_role('paysched_admin', 'MEMBER')
    ELSE false
END
$$;

-- Whether the current role may move a payment from one status to another.
CREATE FUNCTION paysched_may_move(from_status text, to_status text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    a text;
BEGIN
    FOREACH a IN ARRAY paysched_move_actors(from_status, to_status) LOOP
        IF paysched_acts_as(a) THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END
$$;

CREATE FUNCTION paysched_guard_payment() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('is_superuser') = 'on' THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' THEN
        -- Only the API creates, and only a payment nothing has touched.
        IF NOT paysched_acts_as('client') OR NEW.status <> 'PENDING' OR NEW.attempt <> 0 OR NEW.probe_first
           OR NEW.retries <> 0 OR NEW.gateway_ref IS NOT NULL THEN
            RAISE EXCEPTION 'paysched: % may not create payment % as %', current_user, NEW.id, NEW.status
                USING ERRCODE = '42501';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND NOT paysched_may_move(OLD.status, NEW.status) THEN
        RAISE EXCEPTION 'paysched: % may not move payment % from % to % (payment.Moves)', current_user, OLD.id, OLD.status, NEW.status
            USING ERRCODE = '42501';
    END IF;
    -- probe_first says an earlier attempt may have charged the payment:
    -- clearing it on an open payment lets a cancel answer 200 and a charge
    -- go ahead without asking. Only an executor clears it (after the
    -- gateway proved no charge); a move to rest may drop it.
    IF OLD.probe_first AND NOT NEW.probe_first AND NEW.status IN ('PENDING', 'PROCESSING')
       AND NOT paysched_acts_as('executor') THEN
        RAISE EXCEPTION 'paysched: % may not clear probe_first of payment %', current_user, OLD.id
            USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END
$$;

-- Row triggers on the partitioned parent are cloned onto every partition,
-- those made later included: a statement naming a partition is checked too.
-- The WHEN keeps an update that moves nothing from calling the function.
CREATE TRIGGER paysched_guard_insert BEFORE INSERT ON payments
    FOR EACH ROW EXECUTE FUNCTION paysched_guard_payment();
CREATE TRIGGER paysched_guard_move BEFORE UPDATE ON payments
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR (OLD.probe_first AND NOT NEW.probe_first))
    EXECUTE FUNCTION paysched_guard_payment();

-- A payment_actions row names who moved a payment: only that actor's role
-- may write it, and only for a move that actor may make.
CREATE FUNCTION paysched_guard_action() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    cands text[];
    a text;
BEGIN
    IF current_setting('is_superuser') = 'on' THEN
        RETURN NEW;
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
CREATE TRIGGER paysched_guard_action BEFORE INSERT ON payment_actions
    FOR EACH ROW EXECUTE FUNCTION paysched_guard_action();

-- payments-api keeps the payer's side only: create, read, list, cancel.
-- Operator moves, their actions and reconciliation runs move to admin-api.
REVOKE UPDATE ON payments FROM paysched_api;
GRANT UPDATE (status, updated_at) ON payments TO paysched_api;
REVOKE INSERT ON payment_actions FROM paysched_api;
REVOKE SELECT (prev_status) ON payment_actions FROM paysched_api;
REVOKE USAGE ON SEQUENCE payment_actions_id_seq FROM paysched_api;
REVOKE SELECT, INSERT, UPDATE ON reconciliation_runs, reconciliation_items FROM paysched_api;
REVOKE USAGE ON SEQUENCE reconciliation_runs_id_seq FROM paysched_api;

-- admin-api: operators' moves (re-drive, resolve, cancel) with their
-- actions, dead letters with their attempts, reconciliation runs started
-- by an operator (which repair like the reconciler), and the audit log to
-- read.
GRANT SELECT ON payments, payment_index, payment_attempts TO paysched_admin;
GRANT UPDATE (status, gateway_ref, retries, probes, run_at, probe_first, dead_letter_reason, last_error,
              lease_until, lease_owner, updated_at, releases, failure_reason) ON payments TO paysched_admin;
GRANT INSERT, SELECT (prev_status) ON payment_actions TO paysched_admin;
GRANT USAGE ON SEQUENCE payment_actions_id_seq TO paysched_admin;
GRANT SELECT, INSERT ON reconciliation_runs, reconciliation_items TO paysched_admin;
GRANT UPDATE (state, finished_at, charges, payments, repaired, mismatches, error) ON reconciliation_runs TO paysched_admin;
GRANT USAGE ON SEQUENCE reconciliation_runs_id_seq TO paysched_admin;
GRANT SELECT ON audit_events, webhook_events TO paysched_admin;

-- payments-api caps what one actor may have scheduled and not yet due
-- (--max-pending): its count reads this index, at most the cap's worth.
CREATE INDEX IF NOT EXISTS payment_index_payer_due ON payment_index (payer, due_time);

-- Partitions: the owner's functions now check what they are asked.
-- ensure makes at most 800 days, from a week ago (a year's horizon and
-- slack): a caller cannot fill the catalog with partitions.
CREATE OR REPLACE FUNCTION paysched_ensure_partitions(from_day date, to_day date)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    d date := from_day;
    created integer := 0;
    part text;
BEGIN
    IF from_day IS NULL OR to_day IS NULL OR to_day < from_day
       OR from_day < current_date - 7 OR to_day > current_date + 800 THEN
        RAISE EXCEPTION 'paysched_ensure_partitions(%, %): want a range from at most 7 days ago to at most 800 days ahead', from_day, to_day
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(7202611301);
    WHILE d <= to_day LOOP
        part := format('payments_p%s', to_char(d, 'YYYYMMDD'));
        IF to_regclass(part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF payments FOR VALUES FROM (%L) TO (%L)',
                part,
                (d::timestamp AT TIME ZONE 'UTC'),
                ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            EXECUTE format('ALTER TABLE %I REPLICA IDENTITY FULL', part);
            PERFORM paysched_grant_partition(part);
            created := created + 1;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN created;
END
$$;

-- Retention: drops only partitions of days at least paysched_retention_floor()
-- days gone, by date, never today or later; and never one that still holds
-- a payment not at an end (PENDING, PROCESSING, DEAD_LETTERED): such a
-- partition is kept and reported. The old text argument compared names
-- as strings ('payments_q' sorted after every day).
DROP FUNCTION paysched_drop_partitions_before(text);
CREATE FUNCTION paysched_retention_floor() RETURNS integer LANGUAGE sql IMMUTABLE AS 'SELECT 30';
CREATE FUNCTION paysched_drop_partitions_before(cutoff date) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    part text;
    day date;
    open boolean;
    dropped integer := 0;
BEGIN
    IF cutoff IS NULL OR cutoff > current_date - paysched_retention_floor() THEN
        RAISE EXCEPTION 'paysched_drop_partitions_before(%): the cutoff must be at least % days ago', cutoff, paysched_retention_floor()
            USING ERRCODE = '22023';
    END IF;
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'payments'::regclass AND c.relname ~ '^payments_p[0-9]{8}$' ORDER BY 1
    LOOP
        day := to_date(substr(part, 11), 'YYYYMMDD');
        CONTINUE WHEN day >= cutoff;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status IN (''PENDING'', ''PROCESSING'', ''DEAD_LETTERED''))', part) INTO open;
        IF open THEN
            RAISE WARNING 'paysched: partition % still holds payments that are not at an end: kept', part;
            CONTINUE;
        END IF;
        EXECUTE format('DROP TABLE %I', part);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_drop_partitions_before(date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION paysched_drop_partitions_before(date) TO paysched_reaper;
