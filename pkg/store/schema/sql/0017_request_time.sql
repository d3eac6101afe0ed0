-- paysched schema, version 17: an absence counts once no request can
-- still be running at the PSP (issue 32, item 4).
--
-- A PSP finishes a request its client has left: Stripe makes the charge a
-- create asked for even after the client's connection timed out. A
-- listing a moment later proves an absence that then becomes false, and
-- the moves that act on a proven absence (the spent budget's
-- RETRIES_EXHAUSTED, an operator's resolve or cancel, the resolver's
-- requeue) would say "not charged" of a payment that is. So the row
-- records when its requests were sent, and a proven absence counts only
-- once that is longer ago than the gateway's maximum request time
-- (--gateway-max-request; gateway.Charger.MaxRequest).
--
-- requests_sent_by: every gateway request any attempt of the payment made
-- was sent by this instant (NULL: never claimed). The guard's trigger
-- sets it, for everyone: no role holds UPDATE on it, an insert's is
-- cleared, and a move's is computed, never taken from the statement. A
-- superuser may set it outright (test fixtures; a repair).
ALTER TABLE payments ADD COLUMN requests_sent_by timestamptz;

-- The guard, whole: 0016's, with requests_sent_by kept first.
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
    -- A move back to PENDING by anyone but the executor asks first: the
    -- sweeper's release and the reaper's expiry take back a claim that may
    -- have been dispatched, a re-drive or the resolver's requeue a dead
    -- letter that may have been charged. Only the executor knows what its
    -- attempt did.
    IF NEW.status = 'PENDING' AND OLD.status IS DISTINCT FROM 'PENDING' AND NOT NEW.probe_first
       AND NOT (OLD.status = 'PROCESSING' AND paysched_acts_as('executor')) THEN
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
-- The triggers stay as they are: every move out of PROCESSING changes
-- the status, which paysched_guard_move's WHEN covers.
