-- paysched schema, version 30: a schedule's life as events (issue 44).
-- Each creation, change of plan, pause, resume, end and cancel of a
-- schedule is a schedule_events row, written by the database in the
-- transaction that changes the schedule, whoever changes it (the payer
-- through payments-api, the planner, an operator): no path can skip one,
-- and no role can write one (the trigger's function owns the insert). cdc
-- streams them (paysched.public.schedule_events); the audit-consumer
-- keeps them in the audit log and publishes each as a CloudEvent
-- (paysched.schedule.created, ...), which the webhook-dispatcher delivers
-- to the tenant's endpoints. The planner's own progress (its place, the
-- next instant) is no event: the trigger's WHEN leaves those updates
-- without a call.

CREATE TABLE schedule_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id uuid        NOT NULL REFERENCES schedules (id),
    tenant      text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('CREATED', 'UPDATED', 'PAUSED', 'RESUMED', 'ENDED', 'CANCELLED')),
    -- Who: 'payer', 'planner' (an end, or a pause's resume time come), or
    -- 'admin:<name>' for an operator (the session's paysched.actor).
    actor       text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    -- The schedule as the change left it: the notification's data.
    data        jsonb       NOT NULL
);
CREATE INDEX schedule_events_schedule_idx ON schedule_events (schedule_id, id);

-- The operators' list of every payer's schedules, newest first, and by
-- tenant (the console pages by seq).
CREATE INDEX schedules_seq_idx ON schedules (seq DESC);
CREATE INDEX schedules_tenant_seq_idx ON schedules (tenant, seq DESC);

CREATE FUNCTION paysched_schedule_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    kinds text[];
    k text;
    who text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kinds := ARRAY['CREATED'];
        IF NEW.state = 'ENDED' THEN
            -- A rule with nothing left from its start ends as it is made.
            kinds := array_append(kinds, 'ENDED');
        END IF;
    ELSIF NEW.state IS DISTINCT FROM OLD.state THEN
        kinds := ARRAY[CASE WHEN NEW.state = 'ACTIVE' THEN 'RESUMED' ELSE NEW.state END];
    ELSE
        kinds := ARRAY['UPDATED'];
    END IF;
    -- The planner's statements name it (store.SetPlanned), an operator's
    -- the operator; anything else is the payer's, through payments-api.
    who := coalesce(nullif(current_setting('paysched.actor', true), ''), 'payer');
    FOREACH k IN ARRAY kinds LOOP
        INSERT INTO schedule_events (schedule_id, tenant, kind, actor, data)
        VALUES (NEW.id, NEW.tenant, k, who, jsonb_build_object(
            'scheduleId', NEW.id, 'state', NEW.state, 'payer', NEW.payer, 'payee', NEW.payee,
            'amount', NEW.amount_minor, 'currency', NEW.currency, 'description', NEW.description,
            'metadata', NEW.metadata, 'rrule', NEW.rrule, 'start', NEW.start_local, 'timeZone', NEW.time_zone,
            'monthEnd', NEW.month_end, 'businessDays', NEW.business_days, 'calendar', NEW.calendar,
            'catchUp', NEW.catch_up, 'resumeAt', NEW.resume_at, 'nextAt', NEW.next_at, 'actor', who));
    END LOOP;
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_schedule_event() FROM PUBLIC;

CREATE TRIGGER paysched_schedule_created AFTER INSERT ON schedules
    FOR EACH ROW EXECUTE FUNCTION paysched_schedule_event();
-- A change of state, or of the payment or the plan; never the planner's
-- progress alone (its place and next instant), which would call the
-- function a million times a pass for nothing.
CREATE TRIGGER paysched_schedule_changed AFTER UPDATE ON schedules
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
        OR (OLD.payee, OLD.amount_minor, OLD.currency, OLD.description, OLD.metadata, OLD.rrule, OLD.start_local,
            OLD.time_zone, OLD.month_end, OLD.business_days, OLD.calendar, OLD.catch_up, OLD.catch_up_bound)
           IS DISTINCT FROM
           (NEW.payee, NEW.amount_minor, NEW.currency, NEW.description, NEW.metadata, NEW.rrule, NEW.start_local,
            NEW.time_zone, NEW.month_end, NEW.business_days, NEW.calendar, NEW.catch_up, NEW.catch_up_bound))
    EXECUTE FUNCTION paysched_schedule_event();

-- Read by the console and by cdc's resync; written by nobody but the
-- function above.
GRANT SELECT ON schedule_events TO paysched_admin, paysched_cdc;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'paysched') THEN
        ALTER PUBLICATION paysched ADD TABLE schedule_events;
    END IF;
END
$$;
