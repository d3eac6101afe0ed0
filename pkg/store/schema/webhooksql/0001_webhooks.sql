-- The webhooks' database, version 1: tenants' endpoints and what is owed
-- to them, apart from the schedule (docs/DESIGN.md, "Where the webhooks
-- live"). Their writes (a message and a delivery row per notification and
-- endpoint, more for retries) are never decoded by the schedule's CDC slot,
-- and never share its WAL when the database is on a cluster of its own.
--
-- The fast path (webhook-dispatcher): a notification read from Kafka is
-- attempted at once to each endpoint of its tenant; its body is stored
-- once (webhook_messages) and one final row per endpoint records what
-- became of it (webhook_deliveries) before the Kafka offsets commit. Only a
-- delivery that failed, or could not start within a second, is left
-- WAITING, to be claimed (SKIP LOCKED, a lease) by the retry path.
DO $$
BEGIN
    -- Roles are the cluster's: this database may be on a cluster of its
    -- own, where the schedule's migrations never ran.
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'paysched_webhooks') THEN
        CREATE ROLE paysched_webhooks NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'paysched_admin') THEN
        CREATE ROLE paysched_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'paysched_api') THEN
        CREATE ROLE paysched_api NOLOGIN;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO paysched_webhooks, paysched_admin, paysched_api;

CREATE TABLE webhook_endpoints (
    id              uuid        PRIMARY KEY,
    tenant          text        NOT NULL CHECK (tenant <> '' AND length(tenant) <= 256),
    url             text        NOT NULL CHECK (url <> '' AND length(url) <= 2048),
    -- Empty: every event type.
    event_types     text[]      NOT NULL DEFAULT '{}',
    description     text        NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    enabled         boolean     NOT NULL DEFAULT true,
    -- The signing secrets, newest first: two while a rotation overlaps,
    -- and every delivery is signed by each (the spec's rotation).
    secrets         text[]      NOT NULL CHECK (cardinality(secrets) BETWEEN 1 AND 2),
    -- When the older of two secrets stops signing.
    rotate_until    timestamptz,
    -- At most this many deliveries in flight to the endpoint across the
    -- dispatchers (each holds some of its slots: advisory locks), at most
    -- max_per_second started a second by each dispatcher.
    max_inflight    integer     NOT NULL DEFAULT 4 CHECK (max_inflight BETWEEN 1 AND 64),
    max_per_second  real        NOT NULL DEFAULT 50 CHECK (max_per_second >= 1 AND max_per_second <= 10000),
    -- The first failed attempt since the last success: failing for 5 days
    -- disables the endpoint.
    failing_since   timestamptz,
    disabled_reason text,
    -- A disabling not yet announced (paysched.webhook.endpoint_disabled):
    -- one dispatcher announces it, under a row lock, then clears this.
    disabled_at     timestamptz,
    announce        boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Every change moves it (a trigger): the dispatchers read the changes
    -- since their last look into their endpoint cache.
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant, id);
CREATE INDEX webhook_endpoints_updated_idx ON webhook_endpoints (updated_at);
CREATE INDEX webhook_endpoints_announce_idx ON webhook_endpoints (id) WHERE announce;

CREATE FUNCTION webhook_endpoints_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END
$$;
CREATE TRIGGER webhook_endpoints_touch BEFORE UPDATE ON webhook_endpoints
    FOR EACH ROW EXECUTE FUNCTION webhook_endpoints_touch();

-- A notification's body, once, whatever the number of its endpoints.
CREATE TABLE webhook_messages (
    -- webhook-id: the CloudEvent id, the same on every attempt.
    msg_id      text        PRIMARY KEY,
    event_type  text        NOT NULL,
    tenant      text        NOT NULL,
    payment_id  uuid,
    body        bytea       NOT NULL,
    -- When the notification was made: delivery lag is measured from it.
    noted_at    timestamptz NOT NULL
);
CREATE INDEX webhook_messages_payment_idx ON webhook_messages (payment_id) WHERE payment_id IS NOT NULL;
-- Retention reads by age; rows come in time order, so a block range index
-- serves it at almost no cost per insert.
CREATE INDEX webhook_messages_noted_idx ON webhook_messages USING brin (noted_at);

CREATE TABLE webhook_deliveries (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id     uuid        NOT NULL REFERENCES webhook_endpoints (id),
    msg_id          text        NOT NULL REFERENCES webhook_messages (msg_id) ON DELETE CASCADE,
    -- The message's, copied: recover-since and the lag read it here.
    noted_at        timestamptz NOT NULL,
    state           text        NOT NULL DEFAULT 'WAITING' CHECK (state IN ('WAITING', 'DELIVERED', 'UNDELIVERED')),
    attempts        integer     NOT NULL DEFAULT 0,
    -- A WAITING delivery is due at next_at; a claimed one holds next_at =
    -- lease_until, so a dispatcher that dies leaves it due again then.
    next_at         timestamptz NOT NULL,
    lease_until     timestamptz,
    -- The latest attempt (the earlier ones are in webhook_attempts): a
    -- delivery made at the first try is this one row.
    last_at         timestamptz,
    last_status     integer,
    last_latency_ms integer,
    last_error      text,
    last_response   text,
    done_at         timestamptz,
    UNIQUE (msg_id, endpoint_id)
);
-- Each index costs every delivery's insert: a delivery made at once
-- touches the key, the unique key and the block range index only.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (endpoint_id, next_at, id) WHERE state = 'WAITING';
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (endpoint_id, noted_at) WHERE state = 'UNDELIVERED';
CREATE INDEX webhook_deliveries_noted_idx ON webhook_deliveries USING brin (noted_at);

-- The attempts before a delivery's latest.
CREATE TABLE webhook_attempts (
    delivery_id bigint      NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    at          timestamptz NOT NULL,
    status      integer,
    latency_ms  integer     NOT NULL,
    -- What went wrong (connection, timeout, refusal), and the response's
    -- first 4 KiB.
    error       text,
    response    text,
    PRIMARY KEY (delivery_id, attempt)
);

-- The dispatcher: reads endpoints (secrets included), writes messages,
-- deliveries and attempts, the failure clock and the disabling, and
-- deletes what retention lets go.
GRANT SELECT ON webhook_endpoints TO paysched_webhooks;
GRANT UPDATE (enabled, failing_since, disabled_reason, disabled_at, announce) ON webhook_endpoints TO paysched_webhooks;
GRANT SELECT, INSERT, DELETE ON webhook_messages TO paysched_webhooks;
GRANT SELECT, INSERT, DELETE ON webhook_deliveries TO paysched_webhooks;
GRANT UPDATE (state, attempts, next_at, lease_until, last_at, last_status, last_latency_ms, last_error, last_response, done_at)
    ON webhook_deliveries TO paysched_webhooks;
GRANT SELECT, INSERT, DELETE ON webhook_attempts TO paysched_webhooks;

-- The admin API manages endpoints, resends and recovers.
GRANT SELECT, INSERT ON webhook_endpoints TO paysched_admin;
GRANT UPDATE (url, event_types, description, enabled, secrets, rotate_until, max_inflight, max_per_second,
              failing_since, disabled_reason, disabled_at) ON webhook_endpoints TO paysched_admin;
GRANT SELECT ON webhook_messages, webhook_deliveries, webhook_attempts TO paysched_admin;
GRANT UPDATE (state, next_at, lease_until, done_at) ON webhook_deliveries TO paysched_admin;

-- A rotation keeps the current secret beside the new one: it reads the
-- secrets, which only the dispatcher (and the admin API) may. Run as the
-- owner for the APIs that rotate, so payments-api (a tenant rotating its
-- own endpoint's) never reads a secret. search_path is pinned so a caller
-- cannot substitute objects. It returns whether the endpoint (of the
-- tenant, '' for any) exists.
CREATE FUNCTION paysched_webhook_rotate(p_id uuid, p_tenant text, p_secret text, p_overlap interval) RETURNS boolean
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH r AS (
        UPDATE webhook_endpoints SET secrets = ARRAY[p_secret, secrets[1]], rotate_until = now() + p_overlap
        WHERE id = p_id AND (p_tenant = '' OR tenant = p_tenant)
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM r)
$$;
REVOKE EXECUTE ON FUNCTION paysched_webhook_rotate(uuid, text, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION paysched_webhook_rotate(uuid, text, text, interval) TO paysched_admin, paysched_api;

-- payments-api: a tenant manages its own endpoints (the API scopes every
-- statement to the token's tenant); never their secrets but the one it
-- makes.
GRANT SELECT (id, tenant, url, event_types, description, enabled, max_inflight, max_per_second, disabled_reason,
              failing_since, rotate_until, created_at, updated_at) ON webhook_endpoints TO paysched_api;
GRANT INSERT ON webhook_endpoints TO paysched_api;
GRANT UPDATE (enabled, failing_since, disabled_reason, disabled_at) ON webhook_endpoints TO paysched_api;
GRANT SELECT ON webhook_messages, webhook_deliveries, webhook_attempts TO paysched_api;
GRANT UPDATE (state, next_at, lease_until, done_at) ON webhook_deliveries TO paysched_api;
