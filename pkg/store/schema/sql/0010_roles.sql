-- paysched schema, version 10: one NOLOGIN group role per service, each
-- granted only what that service's code executes.
--
-- Only the role that runs the migrations (the migrate service) owns tables,
-- sequences and functions. Owning is what allows ALTER TABLE (so DISABLE
-- TRIGGER on the append-only tables), DROP, CREATE ... PARTITION OF and
-- publication membership; no service role owns anything, so none can.
-- Roles are cluster-wide and grants are per database: the DO blocks make
-- the role creation idempotent across databases of one cluster.
--
-- Each service logs in as its own LOGIN user that is a member of its group
-- role (CloudNativePG managed roles: login: true, inRoles: [paysched_x]).
-- Group roles are NOLOGIN and hold only privileges, which members inherit.
--
-- REPLICATION is a role attribute and attributes are never inherited, so
-- paysched_cdc cannot pass it on: the cdc LOGIN user itself must have it
-- (CloudNativePG: replication: true on that managed role). paysched_cdc
-- holds cdc's table privileges; no other login user gets REPLICATION.
--
-- Column-level UPDATE grants: no service may update payer, payee,
-- amount_minor, currency, due_time or id of a payment; each may update only
-- the columns its statements set. What each role may do:
--   paysched_api        the public and admin API: create, read, list and
--                       cancel payments, the idempotency records, operator
--                       moves (re-drive, resolve) with their payment_actions
--                       row, and reconciliation runs started from the admin
--                       API. It reads payment_attempts, because
--                       GetScheduledPayment and the dead-letter list show a
--                       payment's attempts, but only the columns it shows and
--                       never writes them ("can't touch attempts" read as
--                       "can't change the record of what the gateway said");
--                       no access at all to audit_events.
--   paysched_sweeper    claim (by partition), release, the rate bucket.
--   paysched_executor   load and complete claims (by partition), write
--                       attempt rows.
--   paysched_reaper     expire leases (writing ABANDONED attempts), forget
--                       old idempotency keys, count the schedule, create and
--                       drop partitions through the definer functions below.
--   paysched_reconciler daily reconciliation, the ambiguity resolver, the
--                       gateway webhooks.
--   paysched_audit      INSERT into audit_events (and read payments' status,
--                       run_at, due_time for the overdue check); no UPDATE,
--                       DELETE or TRUNCATE; of the log it reads only the
--                       conflict key its ON CONFLICT DO NOTHING needs.
--   paysched_cdc        read what it publishes (resync), its own state
--                       tables. REPLICATION on its login user, see above.

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['paysched_api', 'paysched_sweeper', 'paysched_executor', 'paysched_reaper',
                             'paysched_reconciler', 'paysched_audit', 'paysched_cdc'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;

-- Before Postgres 15 every role could create tables in public; nobody but
-- the owner may, on any version.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO paysched_api, paysched_sweeper, paysched_executor, paysched_reaper,
    paysched_reconciler, paysched_audit, paysched_cdc;

-- cdc's tables were created by cdc itself at start; they belong to the
-- schema (cdc's CREATE TABLE IF NOT EXISTS then changes nothing).
CREATE TABLE IF NOT EXISTS cdc_heartbeat (id int PRIMARY KEY, ts timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS cdc_state (slot text PRIMARY KEY, confirmed_lsn pg_lsn NOT NULL, confirmed_at timestamptz NOT NULL);

-- Only a table's owner may publish it, so the publication cdc streams (its
-- default name, paysched) is made here. cdc still creates one under another
-- name when it runs as an owner (tests, local runs as the superuser).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'paysched') THEN
        CREATE PUBLICATION paysched FOR TABLE payments, payment_attempts, payment_actions, cdc_heartbeat
            WITH (publish_via_partition_root = true);
    END IF;
END
$$;

-- payments, through the parent (privileges on a partitioned table are what
-- a statement naming the parent is checked against).
GRANT SELECT, INSERT ON payments TO paysched_api;
GRANT UPDATE (status, gateway_ref, retries, probes, run_at, probe_first, dead_letter_reason, last_error,
              lease_until, lease_owner, updated_at) ON payments TO paysched_api, paysched_reconciler;
GRANT SELECT ON payments TO paysched_sweeper, paysched_executor, paysched_reaper, paysched_reconciler, paysched_cdc;
GRANT UPDATE (status, lease_until, lease_owner, attempt, updated_at) ON payments TO paysched_sweeper;
GRANT UPDATE (status, run_at, retries, probe_first, gateway_ref, last_error, dead_letter_reason,
              lease_until, lease_owner, updated_at) ON payments TO paysched_executor;
GRANT UPDATE (status, retries, probe_first, run_at, last_error, lease_until, lease_owner, updated_at)
    ON payments TO paysched_reaper;
GRANT SELECT (status, run_at, due_time) ON payments TO paysched_audit;

GRANT SELECT, INSERT ON payment_index TO paysched_api;
GRANT SELECT ON payment_index TO paysched_reconciler;
GRANT SELECT (seq, created_at, idempotency_key) ON payment_index TO paysched_reaper;
GRANT UPDATE (idempotency_key, request_hash, response) ON payment_index TO paysched_reaper;
GRANT USAGE ON SEQUENCE payment_index_seq_seq TO paysched_api;

GRANT SELECT (payment_id, attempt, started_at, finished_at, outcome, gateway_ref, error)
    ON payment_attempts TO paysched_api;
GRANT SELECT, INSERT ON payment_attempts TO paysched_executor, paysched_reaper;
GRANT UPDATE (finished_at, outcome, gateway_ref, error, executor_id) ON payment_attempts TO paysched_executor;
GRANT SELECT ON payment_attempts TO paysched_cdc;

-- Append-only by trigger, and nobody but the owner can drop the trigger.
GRANT INSERT, SELECT (prev_status) ON payment_actions TO paysched_api, paysched_reconciler; -- the move's RETURNING
GRANT USAGE ON SEQUENCE payment_actions_id_seq TO paysched_api, paysched_reconciler;
GRANT SELECT ON payment_actions TO paysched_cdc;

-- ON CONFLICT (lsn, table_name, row_key) DO NOTHING, the redelivery no-op,
-- reads the conflict key: the audit writer sees the keys, not the events.
GRANT INSERT, SELECT (lsn, table_name, row_key) ON audit_events TO paysched_audit;

GRANT SELECT, INSERT ON reconciliation_runs, reconciliation_items TO paysched_api, paysched_reconciler;
GRANT UPDATE (state, finished_at, charges, payments, repaired, mismatches, error)
    ON reconciliation_runs TO paysched_api, paysched_reconciler;
GRANT USAGE ON SEQUENCE reconciliation_runs_id_seq TO paysched_api, paysched_reconciler;

GRANT INSERT ON webhook_events TO paysched_reconciler;

GRANT SELECT, INSERT ON rate_buckets TO paysched_sweeper;
GRANT UPDATE (tokens, refreshed_at) ON rate_buckets TO paysched_sweeper;

GRANT SELECT, INSERT ON cdc_heartbeat, cdc_state TO paysched_cdc;
GRANT UPDATE (ts) ON cdc_heartbeat TO paysched_cdc;
GRANT UPDATE (confirmed_lsn, confirmed_at) ON cdc_state TO paysched_cdc;

-- The engine's batch statements name a day's partition (store.partitionSQL),
-- and a statement naming a partition is checked against the partition's own
-- privileges: each partition gets the sweeper's and the executor's grants
-- when it is made. Column lists match the grants on the parent above.
CREATE FUNCTION paysched_grant_partition(part text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT SELECT ON %I TO paysched_sweeper, paysched_executor', part);
    EXECUTE format('GRANT UPDATE (status, lease_until, lease_owner, attempt, updated_at) ON %I TO paysched_sweeper', part);
    EXECUTE format('GRANT UPDATE (status, run_at, retries, probe_first, gateway_ref, last_error, dead_letter_reason,'
                   ' lease_until, lease_owner, updated_at) ON %I TO paysched_executor', part);
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_grant_partition(text) FROM PUBLIC;

-- Creating a partition requires owning the parent, so the upkeep runs as
-- the owner (SECURITY DEFINER) for the roles allowed to call it; partitions
-- are then owned by the owner too. search_path is pinned so a caller cannot
-- substitute objects.
CREATE OR REPLACE FUNCTION paysched_ensure_partitions(from_day date, to_day date)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    d date := from_day;
    created integer := 0;
    part text;
BEGIN
    -- Serialize callers (API start, reaper, migrations) so two never race to
    -- create the same partition.
    PERFORM pg_advisory_xact_lock(7202611301);
    WHILE d <= to_day LOOP
        part := format('payments_p%s', to_char(d, 'YYYYMMDD'));
        IF to_regclass(part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF payments FOR VALUES FROM (%L) TO (%L)',
                part,
                (d::timestamp AT TIME ZONE 'UTC'),
                ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            -- CDC needs whole old rows; partitions don't inherit this setting.
            EXECUTE format('ALTER TABLE %I REPLICA IDENTITY FULL', part);
            PERFORM paysched_grant_partition(part);
            created := created + 1;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN created;
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_ensure_partitions(date, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION paysched_ensure_partitions(date, date) TO paysched_api, paysched_reaper;

-- Retention: dropping a table requires owning it. It drops only partitions
-- of payments, only those named before cutoff (payments_pYYYYMMDD), and
-- returns how many.
CREATE FUNCTION paysched_drop_partitions_before(cutoff text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    part text;
    dropped integer := 0;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'payments'::regclass AND c.relname < cutoff ORDER BY 1
    LOOP
        EXECUTE format('DROP TABLE %I', part);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_drop_partitions_before(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION paysched_drop_partitions_before(text) TO paysched_reaper;

-- The partitions that exist already.
SELECT paysched_grant_partition(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'payments'::regclass;
