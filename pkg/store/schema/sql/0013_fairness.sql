-- paysched schema, version 13: fair claims across tenants.
--
-- tenant is whom a payment is scheduled for, as the sweepers share claims:
-- the token's tenant claim, else the payer (the API's actor). It is set at
-- create and never changes. Rows made before this version are the tenant
-- '' unless they are open (PENDING, PROCESSING), which take their payer.
ALTER TABLE payments ADD COLUMN tenant text NOT NULL DEFAULT '';
UPDATE payments SET tenant = payer WHERE tenant = '' AND status IN ('PENDING', 'PROCESSING');

-- The fair claim's index: each tenant's PENDING rows in claim order. The
-- sweeper walks its distinct tenants (a loose index scan, a bounded number
-- of tenants per round) and takes each one's share from its own run_at
-- order, so a tenant with 20 due rows is not queued behind one with 200k.
CREATE INDEX payments_tenant_sweep_idx ON payments (tenant, run_at) WHERE status = 'PENDING';

-- What an operator set for a tenant; a tenant without a row, or a NULL
-- cap, gets the sweepers' defaults (--tenant-max-inflight,
-- --tenant-max-rate).
CREATE TABLE tenant_limits (
    tenant       text        PRIMARY KEY CHECK (tenant <> '' AND length(tenant) <= 256),
    -- weight: a backlogged tenant's share of each claim round, relative
    -- to the others'.
    weight       integer     NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    -- max_inflight: payments claimed and not yet settled, across sweepers.
    max_inflight integer     CHECK (max_inflight > 0),
    -- max_rate: claims per second, across every sweeper.
    max_rate     double precision CHECK (max_rate > 0 AND max_rate <= 1000000),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    updated_by   text        NOT NULL
);

GRANT SELECT ON tenant_limits TO paysched_sweeper, paysched_admin;
GRANT INSERT, UPDATE, DELETE ON tenant_limits TO paysched_admin;

-- admin-api lists tenants with the sweepers' walk, which names each
-- partition: it reads them (and only reads them).
CREATE OR REPLACE FUNCTION paysched_grant_partition(part text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT SELECT ON %I TO paysched_sweeper, paysched_executor, paysched_admin', part);
    EXECUTE format('GRANT UPDATE (status, lease_until, lease_owner, attempt, updated_at) ON %I TO paysched_sweeper', part);
    EXECUTE format('GRANT UPDATE (status, run_at, retries, probe_first, gateway_ref, last_error, dead_letter_reason,'
                   ' lease_until, lease_owner, updated_at, releases, failure_reason) ON %I TO paysched_executor', part);
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_grant_partition(text) FROM PUBLIC;

SELECT paysched_grant_partition(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'payments'::regclass;
