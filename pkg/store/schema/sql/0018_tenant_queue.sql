-- paysched schema, version 18: fair claims reach every tenant (issue 33).
--
-- Until now the sweepers found the tenants with due rows by walking the
-- tenant index in name order, 256 tenants a round, due or not: a tenant
-- past the window waited for the walk to come round, an idle poll probed
-- every walked tenant, and 1M tenants took minutes to cycle. Now each
-- tenant with PENDING rows has one row in tenant_queue, and the walk reads
-- only the due ones, oldest first, from a cursor: its cost is the tenants
-- it returns, and a due tenant is reached within ceil(due tenants / 256)
-- rounds. docs/DESIGN.md, "Fair claims", has the bounds.
--
-- tenant_queue.next_at is a lower bound: every PENDING row of the tenant
-- has run_at >= next_at. It is kept so by two parties that never wait on
-- each other:
--   * whoever makes a row PENDING (a create, a retry, a lease's end, a
--     re-drive, a release) appends a wakeup (tenant, its transaction,
--     run_at) by trigger. The key holds the writer's own transaction id, so
--     no writer ever waits on another, and a batch of one tenant's rows is
--     one wakeup.
--   * the sweepers fold the wakeups into tenant_queue (lowering next_at,
--     in tenant order) at each walk, and settle the tenants they found
--     drained: under FOR UPDATE SKIP LOCKED, next_at becomes the tenant's
--     oldest PENDING run_at, read after the lock, or the row goes.
-- A settle that read before a writer committed is followed by the fold of
-- that writer's wakeup, which waits for the settle's lock and lowers
-- next_at again; a writer that committed before the settle's read is in
-- it. So no PENDING row is ever left below its tenant's next_at.
CREATE TABLE tenant_queue (
    tenant  text        PRIMARY KEY,
    next_at timestamptz NOT NULL
);
CREATE INDEX tenant_queue_next_idx ON tenant_queue (next_at, tenant);

CREATE TABLE tenant_wakeups (
    tenant text        NOT NULL,
    xid    xid8        NOT NULL,
    run_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, xid)
);

-- The writers' half: SECURITY DEFINER, so no role needs a grant on either
-- table to make a row PENDING.
CREATE FUNCTION paysched_tenant_wakeup() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    INSERT INTO tenant_wakeups AS w (tenant, xid, run_at) VALUES (NEW.tenant, pg_current_xact_id(), NEW.run_at)
    ON CONFLICT (tenant, xid) DO UPDATE SET run_at = EXCLUDED.run_at WHERE w.run_at > EXCLUDED.run_at;
    RETURN NEW;
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_tenant_wakeup() FROM PUBLIC;

-- BEFORE, not AFTER: a bulk load queues no after-trigger events. Named to
-- run after paysched_guard_* (triggers fire in name order), which may
-- refuse the row first. A row that stays PENDING with a later run_at needs
-- no wakeup: next_at is a lower bound.
CREATE TRIGGER paysched_tenant_wakeup_insert BEFORE INSERT ON payments
    FOR EACH ROW WHEN (NEW.status = 'PENDING') EXECUTE FUNCTION paysched_tenant_wakeup();
CREATE TRIGGER paysched_tenant_wakeup_move BEFORE UPDATE ON payments
    FOR EACH ROW WHEN (NEW.status = 'PENDING' AND (OLD.status <> 'PENDING' OR NEW.run_at < OLD.run_at))
    EXECUTE FUNCTION paysched_tenant_wakeup();

-- The sweepers' walk: fold what the writers appended (at most fold_max
-- wakeups, in tenant order so two folds never deadlock), then return up to
-- max_tenants due tenants after the cursor (after_at, after_tenant) in
-- (next_at, tenant) order, and the earliest tenant not yet due (due =
-- false), if any: when the next one falls due. Each statement here reads
-- a fresh snapshot, so the walk sees the fold.
CREATE FUNCTION paysched_due_tenants(after_at timestamptz, after_tenant text, max_tenants integer, fold_max integer)
RETURNS TABLE (tenant text, next_at timestamptz, due boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
BEGIN
    WITH w AS (
        DELETE FROM tenant_wakeups WHERE ctid = ANY (ARRAY(
            SELECT ctid FROM tenant_wakeups LIMIT fold_max FOR UPDATE SKIP LOCKED))
        RETURNING tenant_wakeups.tenant, tenant_wakeups.run_at
    )
    INSERT INTO tenant_queue AS q (tenant, next_at)
    SELECT w.tenant, min(w.run_at) FROM w GROUP BY w.tenant ORDER BY w.tenant
    ON CONFLICT ON CONSTRAINT tenant_queue_pkey DO UPDATE SET next_at = EXCLUDED.next_at WHERE q.next_at > EXCLUDED.next_at;

    RETURN QUERY
    (SELECT q.tenant, q.next_at, true FROM tenant_queue q
     WHERE q.next_at <= now() AND (q.next_at, q.tenant) > (after_at, after_tenant)
     ORDER BY q.next_at, q.tenant LIMIT max_tenants)
    UNION ALL
    (SELECT q.tenant, q.next_at, false FROM tenant_queue q WHERE q.next_at > now()
     ORDER BY q.next_at LIMIT 1);
END
$$;

-- The sweepers' settle: tenants whose share came back short are drained,
-- or their rows are claimed or locked by another sweeper. Each one not
-- locked by a fold or another settle gets next_at = its oldest PENDING
-- run_at, read after its lock, or leaves the queue. It never waits.
CREATE FUNCTION paysched_settle_tenants(tenants text[]) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    t text;
    m timestamptz;
    i uuid;
    n integer := 0;
BEGIN
    FOR t IN SELECT q.tenant FROM tenant_queue q WHERE q.tenant = ANY (tenants)
             ORDER BY q.tenant FOR UPDATE SKIP LOCKED LOOP
        -- The oldest run_at, read with the id: a plain index scan, not an
        -- index-only one, so the entries of rows claimed since (dead at
        -- the head of a drained tenant's range after a spike) are marked
        -- dead as it passes them, and the next reader skips them.
        m := NULL;
        SELECT p.run_at, p.id INTO m, i FROM payments p WHERE p.tenant = t AND p.status = 'PENDING'
        ORDER BY p.run_at LIMIT 1;
        IF m IS NULL THEN
            DELETE FROM tenant_queue WHERE tenant_queue.tenant = t;
        ELSE
            UPDATE tenant_queue SET next_at = m WHERE tenant_queue.tenant = t;
        END IF;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

REVOKE EXECUTE ON FUNCTION paysched_due_tenants(timestamptz, text, integer, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION paysched_settle_tenants(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION paysched_due_tenants(timestamptz, text, integer, integer) TO paysched_sweeper;
GRANT EXECUTE ON FUNCTION paysched_settle_tenants(text[]) TO paysched_sweeper;
-- Operators read the queue (the console's tenants); nobody writes it but
-- the functions above.
GRANT SELECT ON tenant_queue TO paysched_sweeper, paysched_admin;

-- The queue as the rows stand. The triggers exist first: their CREATE
-- holds off writers until this commits, so none is missed.
INSERT INTO tenant_queue (tenant, next_at)
SELECT p.tenant, min(p.run_at) FROM payments p WHERE p.status = 'PENDING' GROUP BY p.tenant;
