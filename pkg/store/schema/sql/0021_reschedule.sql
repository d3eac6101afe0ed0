-- paysched schema, version 21: operators reschedule and run now (issue
-- 33), and retention keeps HELD payments.
--
-- A reschedule moves run_at, never due_time: the due time is the instant
-- the client scheduled and the partition key, so the row never changes
-- partition (DESIGN.md, "Reschedule and run now").
ALTER TABLE console_requests DROP CONSTRAINT console_requests_action_check;
ALTER TABLE console_requests ADD CONSTRAINT console_requests_action_check CHECK (action IN
    ('REDRIVE', 'RESOLVE', 'CANCEL', 'HOLD', 'RELEASE', 'CANCEL_PENDING', 'CANCEL_HELD', 'RESCHEDULE', 'RUN_NOW'));
-- The new run time of a RESCHEDULE request, fixed when requested (what
-- the approver approves).
ALTER TABLE console_requests ADD COLUMN run_at timestamptz;
ALTER TABLE console_requests ADD CONSTRAINT console_requests_run_at_check CHECK ((action = 'RESCHEDULE') = (run_at IS NOT NULL));

-- Retention, whole: 0012's, with HELD among the payments not at an end. A
-- HELD payment waits for an operator, however old its day: its partition
-- is kept, never dropped with it.
CREATE OR REPLACE FUNCTION paysched_drop_partitions_before(cutoff date) RETURNS integer
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
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I WHERE status IN (''PENDING'', ''HELD'', ''PROCESSING'', ''DEAD_LETTERED''))', part) INTO open;
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
