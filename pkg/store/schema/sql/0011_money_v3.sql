-- paysched schema, version 11: money rules v3.
--
-- releases counts the claims of a payment released untouched in a row (the
-- executor would not start a call its lease could not hold). Past the
-- executor's --max-releases the payment is dead-lettered LEASE_TOO_SHORT
-- instead of looping claim, release, claim with nothing charged and nothing
-- learned. Any recorded attempt resets it.
--
-- failure_reason is why a FAILED payment failed, as a stable code a payer
-- may read (payment.FailReason): DECLINED, AUTHENTICATION_REQUIRED,
-- PSP_TIMEOUT, RESOLVED_BY_OPERATOR. The gateway's own words stay in
-- last_error.
ALTER TABLE payments ADD COLUMN releases smallint NOT NULL DEFAULT 0;
ALTER TABLE payments ADD COLUMN failure_reason text;

GRANT UPDATE (releases, failure_reason) ON payments TO paysched_executor;
-- The fenced moves (operators, the resolver, webhooks, repairs) set both:
-- a re-drive starts a fresh count.
GRANT UPDATE (releases, failure_reason) ON payments TO paysched_api, paysched_reconciler;

CREATE OR REPLACE FUNCTION paysched_grant_partition(part text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT SELECT ON %I TO paysched_sweeper, paysched_executor', part);
    EXECUTE format('GRANT UPDATE (status, lease_until, lease_owner, attempt, updated_at) ON %I TO paysched_sweeper', part);
    EXECUTE format('GRANT UPDATE (status, run_at, retries, probe_first, gateway_ref, last_error, dead_letter_reason,'
                   ' lease_until, lease_owner, updated_at, releases, failure_reason) ON %I TO paysched_executor', part);
END
$$;
REVOKE EXECUTE ON FUNCTION paysched_grant_partition(text) FROM PUBLIC;

SELECT paysched_grant_partition(c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'payments'::regclass;
