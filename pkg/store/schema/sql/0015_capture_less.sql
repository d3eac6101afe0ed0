-- paysched schema, version 15: less to capture per payment (event path v3).
--
-- Under REPLICA IDENTITY FULL every update of a payment wrote its whole old
-- row into the WAL, and the walsender decoded and sent both images: the
-- claim and the outcome, twice per payment. What readers took from the old
-- image was one field, the status it left (the notifications announce a
-- move to rest, and chaos checks the chain of statuses). That field is now
-- a column of the row itself, prev_status, and the old image is no longer
-- logged: REPLICA IDENTITY DEFAULT, as Debezium's connector expects by
-- default (the change event's "before" is then null for updates, and the
-- key for deletes; docs/EVENTS.md).

ALTER TABLE payments ADD COLUMN prev_status text;

-- An outcome's attempt row is announced by its payment's change. The
-- executor writes a payment's outcome and its attempt row in one statement;
-- each was a change for the walsender to decode and send, and for cdc to
-- read: three changes per payment (claim, outcome, attempt). Now the
-- outcome's change carries the attempt (these columns, which describe the
-- attempt recorded by that change and no other: the guard's trigger clears
-- them on any update that records none), cdc derives the attempt's change
-- event from it, and the publication leaves out the attempt rows so
-- announced (announced = true). Every other attempt row (the reaper's
-- ABANDONED ones, a fenced outcome's, the replacement of an ABANDONED row
-- by a late outcome) is published as before. docs/EVENTS.md.
ALTER TABLE payments ADD COLUMN attempt_outcome text, ADD COLUMN attempt_started_at timestamptz,
    ADD COLUMN attempt_error text, ADD COLUMN attempt_ref text, ADD COLUMN attempt_executor text;
ALTER TABLE payment_attempts ADD COLUMN announced boolean NOT NULL DEFAULT false;
GRANT UPDATE (attempt_outcome, attempt_started_at, attempt_error, attempt_ref, attempt_executor) ON payments TO paysched_executor;
GRANT UPDATE (announced) ON payment_attempts TO paysched_executor;
CREATE OR REPLACE FUNCTION paysched_grant_partition(part text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT SELECT ON %I TO paysched_sweeper, paysched_executor, paysched_admin', part);
    EXECUTE format('GRANT UPDATE (status, lease_until, lease_owner, attempt, updated_at) ON %I TO paysched_sweeper', part);
    EXECUTE format('GRANT UPDATE (status, run_at, retries, probe_first, gateway_ref, last_error, dead_letter_reason,'
                   ' lease_until, lease_owner, updated_at, releases, failure_reason, attempt_outcome, attempt_started_at,'
                   ' attempt_error, attempt_ref, attempt_executor) ON %I TO paysched_executor', part);
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_grant_partition(text) FROM PUBLIC;
SELECT paysched_grant_partition(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'payments'::regclass;

-- The publication the migrations made (cdc makes its own only when it
-- owns the tables) leaves out announced attempt rows: a row filter, which
-- for an update holds the old and the new row to it, so the replacement of
-- an unannounced ABANDONED row is still an update event.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'paysched') THEN
        ALTER PUBLICATION paysched SET TABLE payments, payment_actions, cdc_heartbeat,
            payment_attempts WHERE (NOT announced);
    END IF;
END
$$;

-- prev_status is the status the row had before its latest update (NULL
-- until its first), set by the guard's trigger before anything else,
-- whoever updates, superusers included: it is the record's, not a check.
-- No role may write it (no grant names it), and the trigger overwrites
-- whatever an UPDATE sets. The trigger keeps the attempt columns to the
-- change that wrote them, likewise.
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

-- The update trigger now also fires when prev_status would be stale (an
-- update that keeps the status, a repair of gateway_ref say, right after a
-- move must record that it left the status it kept, or a reader would
-- announce the move twice) and when attempt columns are set or to be
-- cleared. An update that changes nothing of the kind still does not call
-- the function.
DROP TRIGGER paysched_guard_move ON payments;
CREATE TRIGGER paysched_guard_move BEFORE UPDATE ON payments
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR NEW.prev_status IS DISTINCT FROM OLD.status
                       OR (OLD.probe_first AND NOT NEW.probe_first)
                       OR OLD.attempt_started_at IS NOT NULL OR NEW.attempt_started_at IS NOT NULL)
    EXECUTE FUNCTION paysched_guard_payment();

-- Partitions carry their own replica identity: the parent's and every
-- existing partition's go back to the primary key, and new partitions are
-- made without FULL.
--
-- And room for a payment's updates on its own page (fillfactor 50). Every
-- claim and every outcome writes a new version of the row (status is in
-- the partial indexes' predicates, so never a HOT update); on a full page
-- the new version went to another page, and heap_update first WAL-logged
-- a lock of the old one to release the page: two more WAL records per
-- payment, which the walsender reads one by one. A page half empty at
-- insert holds a claim's new versions of all its rows, and pruning frees
-- the old ones for the outcomes. Existing pages keep their fill; pages
-- filled from now on leave the room.
ALTER TABLE payments REPLICA IDENTITY DEFAULT;
DO $$
DECLARE
    part text;
BEGIN
    FOR part IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'payments'::regclass LOOP
        EXECUTE format('ALTER TABLE %I REPLICA IDENTITY DEFAULT', part);
        EXECUTE format('ALTER TABLE %I SET (fillfactor = 50)', part);
    END LOOP;
END
$$;

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
            -- REPLICA IDENTITY DEFAULT, a new table's own: no old images;
            -- fillfactor 50: a payment's updates stay on its page.
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF payments FOR VALUES FROM (%L) TO (%L) WITH (fillfactor = 50)',
                part,
                (d::timestamp AT TIME ZONE 'UTC'),
                ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            PERFORM paysched_grant_partition(part);
            created := created + 1;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN created;
END
$$;
