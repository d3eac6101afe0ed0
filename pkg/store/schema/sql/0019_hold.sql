-- paysched schema, version 19: an operator holds a PENDING payment
-- (issue 33). HELD is a status the sweepers never claim (every claim reads
-- status = 'PENDING'); only an operator releases it (back to PENDING) or
-- cancels it, and gateway truth still repairs it (pkg/payment.Moves).
--
-- The status CHECK is replaced whole: adding it validates every row once,
-- at this migration.
ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check CHECK (status IN
    ('PENDING', 'HELD', 'PROCESSING', 'COMPLETED', 'FAILED', 'CANCELLED', 'DEAD_LETTERED'));

-- The console's requests act on PENDING and HELD payments too: hold,
-- release and cancel, pinned and approved as dead-letter actions are.
ALTER TABLE console_requests DROP CONSTRAINT console_requests_action_check;
ALTER TABLE console_requests ADD CONSTRAINT console_requests_action_check CHECK (action IN
    ('REDRIVE', 'RESOLVE', 'CANCEL', 'HOLD', 'RELEASE', 'CANCEL_PENDING', 'CANCEL_HELD'));

-- The actors that may move a payment from one status to another: exactly
-- pkg/payment.Moves (TestDatabaseMovesAreTheGoMoves compares them).
CREATE OR REPLACE FUNCTION paysched_move_actors(from_status text, to_status text) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE from_status || '>' || to_status
    WHEN 'PENDING>PROCESSING' THEN ARRAY['sweeper']
    WHEN 'PENDING>COMPLETED' THEN ARRAY['reconciler', 'webhook']
    WHEN 'PENDING>FAILED' THEN ARRAY['webhook']
    WHEN 'PENDING>CANCELLED' THEN ARRAY['client', 'operator']
    WHEN 'PENDING>HELD' THEN ARRAY['operator']
    WHEN 'HELD>PENDING' THEN ARRAY['operator']
    WHEN 'HELD>CANCELLED' THEN ARRAY['operator']
    WHEN 'HELD>COMPLETED' THEN ARRAY['reconciler', 'webhook']
    WHEN 'HELD>FAILED' THEN ARRAY['webhook']
    WHEN 'PROCESSING>PENDING' THEN ARRAY['sweeper', 'executor', 'reaper']
    WHEN 'PROCESSING>COMPLETED' THEN ARRAY['executor', 'reconciler']
    WHEN 'PROCESSING>FAILED' THEN ARRAY['executor']
    WHEN 'PROCESSING>DEAD_LETTERED' THEN ARRAY['executor']
    WHEN 'FAILED>COMPLETED' THEN ARRAY['reconciler']
    WHEN 'CANCELLED>COMPLETED' THEN ARRAY['reconciler']
    WHEN 'DEAD_LETTERED>PENDING' THEN ARRAY['resolver', 'operator']
    WHEN 'DEAD_LETTERED>COMPLETED' THEN ARRAY['reconciler', 'webhook', 'resolver']
    WHEN 'DEAD_LETTERED>FAILED' THEN ARRAY['webhook', 'resolver', 'operator']
    WHEN 'DEAD_LETTERED>CANCELLED' THEN ARRAY['operator']
    ELSE ARRAY[]::text[]
END
$$;

-- The guard, whole: 0017's, with the release from HELD keeping
-- probe_first as it was.
CREATE OR REPLACE FUNCTION paysched_guard_payment() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.requests_sent_by := NULL;
        NEW.prev_status := NULL;
        NEW.attempt_outcome := NULL; NEW.attempt_started_at := NULL; NEW.attempt_error := NULL;
        NEW.attempt_ref := NULL; NEW.attempt_executor := NULL;
    ELSE
        -- requests_sent_by: leaving PROCESSING, the claim's requests were
        -- all sent by now and by its lease's end, whichever is first. The
        -- executor names itself (attempt_executor) on every move it makes;
        -- with no attempt started, its claim sent nothing (it paced, refused
        -- a short lease, or waits for an absence to count) and the earlier
        -- bound stays, or the bound would follow its releases forever. Any
        -- other update keeps the bound.
        IF OLD.status = 'PROCESSING' AND NEW.status IS DISTINCT FROM 'PROCESSING' THEN
            IF NEW.attempt_started_at IS NULL AND NEW.attempt_executor IS NOT NULL THEN
                NEW.requests_sent_by := OLD.requests_sent_by;
            ELSE
                NEW.requests_sent_by := GREATEST(OLD.requests_sent_by, LEAST(OLD.lease_until, now()));
            END IF;
        ELSIF current_setting('is_superuser') <> 'on' THEN
            NEW.requests_sent_by := OLD.requests_sent_by;
        END IF;
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
        -- Only the API creates, and only a payment nothing has touched:
        -- claimable at its due time and no sooner or later, leased by
        -- nobody, no budget spent, nothing heard from the gateway, and
        -- scheduled for a tenant that is a name (the token's claim or the
        -- payer: never empty, at most 256 bytes, as auth checks).
        IF NOT paysched_acts_as('client') OR NEW.status <> 'PENDING' OR NEW.attempt <> 0 OR NEW.probe_first
           OR NEW.retries <> 0 OR NEW.probes <> 0 OR NEW.releases <> 0 OR NEW.gateway_ref IS NOT NULL
           OR NEW.run_at IS DISTINCT FROM NEW.due_time
           OR NEW.lease_until IS NOT NULL OR NEW.lease_owner IS NOT NULL
           OR NEW.last_error IS NOT NULL OR NEW.dead_letter_reason IS NOT NULL OR NEW.failure_reason IS NOT NULL
           OR NEW.tenant = '' OR octet_length(NEW.tenant) > 256 THEN
            RAISE EXCEPTION 'paysched: % may not create payment % as % (a new payment is PENDING at its due time, untouched, with a tenant)',
                current_user, NEW.id, NEW.status
                USING ERRCODE = '42501';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND NOT paysched_may_move(OLD.status, NEW.status) THEN
        RAISE EXCEPTION 'paysched: % may not move payment % from % to % (payment.Moves)', current_user, OLD.id, OLD.status, NEW.status
            USING ERRCODE = '42501';
    END IF;
    -- probe_first says an earlier attempt may have charged the payment. It
    -- goes from true to false only in the executor's move out of
    -- PROCESSING, made after the gateway proved no charge (or answered
    -- one), whatever the status: cleared anywhere else (a dead letter, a
    -- payment at rest, an open one) the doubt is lost, and a move back to
    -- PENDING later charges without asking.
    IF OLD.probe_first AND NOT NEW.probe_first
       AND NOT (OLD.status = 'PROCESSING' AND NEW.status IS DISTINCT FROM 'PROCESSING' AND paysched_acts_as('executor')) THEN
        RAISE EXCEPTION 'paysched: % may not clear probe_first of payment % (% to %): only the executor''s move out of PROCESSING does',
            current_user, OLD.id, OLD.status, NEW.status
            USING ERRCODE = '42501';
    END IF;
    -- A release from HELD keeps probe_first as it was (it cannot be
    -- cleared, above): a hold is entered only from PENDING, where nothing
    -- is in flight, so the release adds no doubt.
    -- A move back to PENDING by anyone but the executor asks first: the
    -- sweeper's release and the reaper's expiry take back a claim that may
    -- have been dispatched, a re-drive or the resolver's requeue a dead
    -- letter that may have been charged. Only the executor knows what its
    -- attempt did.
    IF NEW.status = 'PENDING' AND OLD.status IS DISTINCT FROM 'PENDING' AND NOT NEW.probe_first
       AND NOT (OLD.status = 'PROCESSING' AND paysched_acts_as('executor'))
       AND OLD.status IS DISTINCT FROM 'HELD' THEN
        RAISE EXCEPTION 'paysched: % may not move payment % from % to PENDING without probe_first', current_user, OLD.id, OLD.status
            USING ERRCODE = '42501';
    END IF;
    -- A payer's cancel answers "not charged": never while an attempt may
    -- have charged. An operator's cancel asks the gateway first (admin-api).
    IF OLD.status = 'PENDING' AND NEW.status = 'CANCELLED' AND OLD.probe_first AND NOT paysched_acts_as('operator') THEN
        RAISE EXCEPTION 'paysched: % may not cancel payment %: an attempt may have charged it (probe_first)', current_user, OLD.id
            USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END
$$;
