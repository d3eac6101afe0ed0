-- Engine v2: no start marker and no unfinished attempt rows.
--
-- probe_first says an earlier attempt may have reached the gateway without
-- a definitive answer (its lease expired, the transport failed after
-- sending, the gateway did not answer). The next attempt asks the gateway
-- (GetCharge) before it charges again, and a cancel is refused while it is
-- set: the payment may be charged.
ALTER TABLE payments ADD COLUMN probe_first boolean NOT NULL DEFAULT false;

-- Payments whose last attempt did not end definitively are probed first.
UPDATE payments p SET probe_first = true
WHERE p.status IN ('PENDING', 'PROCESSING', 'DEAD_LETTERED')
  AND EXISTS (SELECT 1 FROM payment_attempts a WHERE a.payment_id = p.id
              AND (a.outcome IS NULL OR a.outcome IN ('AMBIGUOUS', 'ABANDONED', 'RETRYABLE')));

-- Attempt rows are now written once, with their outcome; the reaper writes
-- ABANDONED for a lease it takes back. KEY_CONFLICT: the gateway holds
-- another charge under the key.
UPDATE payment_attempts SET finished_at = now(), outcome = 'ABANDONED', error = 'unfinished at the engine v2 migration'
WHERE finished_at IS NULL;
ALTER TABLE payment_attempts DROP CONSTRAINT payment_attempts_outcome_check;
ALTER TABLE payment_attempts ADD CONSTRAINT payment_attempts_outcome_check
    CHECK (outcome IN ('SUCCEEDED', 'DECLINED', 'RETRYABLE', 'AMBIGUOUS', 'ABANDONED', 'KEY_CONFLICT'));
DROP INDEX IF EXISTS payment_attempts_open_idx;
