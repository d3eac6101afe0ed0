-- paysched schema, version 2: what the execution engine needs.

-- retries counts attempts that ended without a definitive answer (retryable,
-- ambiguous, abandoned). It is the retry budget, kept apart from attempt (the
-- fencing token) so that releasing an undispatched claim keeps the token
-- monotonic without spending budget.
ALTER TABLE payments ADD COLUMN retries integer NOT NULL DEFAULT 0 CHECK (retries >= 0);

-- ABANDONED: the reaper found the attempt's lease expired.
ALTER TABLE payment_attempts DROP CONSTRAINT payment_attempts_outcome_check;
ALTER TABLE payment_attempts ADD CONSTRAINT payment_attempts_outcome_check
    CHECK (outcome IN ('SUCCEEDED', 'DECLINED', 'RETRYABLE', 'AMBIGUOUS', 'ABANDONED'));

-- rate_buckets is the cluster-wide token bucket that paces claims to the
-- gateway's rate ceiling across every sweeper.
CREATE TABLE rate_buckets (
    name         text PRIMARY KEY,
    tokens       double precision NOT NULL,
    refreshed_at timestamptz NOT NULL
);

-- An attempt row is inserted when the attempt starts and updated once when
-- it ends: free space on its page lets that update be HOT (no index write).
ALTER TABLE payment_attempts SET (fillfactor = 70);
