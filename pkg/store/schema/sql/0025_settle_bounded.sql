-- paysched schema, version 25: a settle reads only the partitions a claim
-- can reach (issue 42). Version 18's settle asked each tenant for its
-- oldest PENDING row over every partition, a year ahead: ~370 index probes
-- a tenant, and 60 ms a call at a steady 1,000 payments a second, more CPU
-- than the payments themselves. It now reads the rows due by a day from
-- now: a row due later has run_at >= due_time, so when none is found by
-- then, "not before a day from now" is a true lower bound for next_at,
-- and the tenant is looked at again then. A tenant so found stays in the
-- queue (nothing proves it has no PENDING row beyond the day); one woken
-- with none due is settled again, a day on, at one settle a day.
--
-- Its plan is generic, made once per session: the sweepers' connections
-- ask for custom plans (svc.CustomPlans, right for their statements that
-- name one partition), and a custom plan of this query over ~370
-- partitions took 70 ms to make, at every call; the generic one prunes
-- them when it starts (now() is stable) and runs in a millisecond.
CREATE OR REPLACE FUNCTION paysched_settle_tenants(tenants text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    t text;
    m timestamptz;
    i uuid;
    bound timestamptz := now() + interval '1 day';
    n integer := 0;
BEGIN
    FOR t IN SELECT q.tenant FROM tenant_queue q WHERE q.tenant = ANY (tenants)
             ORDER BY q.tenant FOR UPDATE SKIP LOCKED LOOP
        -- The oldest run_at, read with the id: a plain index scan, not an
        -- index-only one, so the entries of rows claimed since (dead at
        -- the head of a drained tenant's range after a spike) are marked
        -- dead as it passes them, and the next reader skips them. The
        -- due_time bound prunes the partitions past it (at the plan's
        -- start: now() is stable).
        m := NULL;
        SELECT p.run_at, p.id INTO m, i FROM payments p
        WHERE p.tenant = t AND p.status = 'PENDING' AND p.due_time <= now() + interval '1 day'
        ORDER BY p.run_at LIMIT 1;
        UPDATE tenant_queue SET next_at = coalesce(least(m, bound), bound) WHERE tenant_queue.tenant = t;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
