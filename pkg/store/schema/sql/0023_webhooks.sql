-- paysched schema, version 23: outbound webhooks (issue 34). A tenant's
-- endpoints, and the deliveries owed to them: the schedule of deliveries is
-- this table, claimed with SKIP LOCKED like payments, never a queue in
-- memory. The webhook-dispatcher (role paysched_webhooks) fans each
-- notification out into one delivery per subscribed endpoint, keyed by
-- (endpoint, the CloudEvent id): a notification read twice from Kafka makes
-- no second delivery.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'paysched_webhooks') THEN
        CREATE ROLE paysched_webhooks NOLOGIN;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO paysched_webhooks;

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
    -- At most this many deliveries in flight to the endpoint, at most
    -- max_per_second started a second (each dispatcher's share).
    max_inflight    integer     NOT NULL DEFAULT 4 CHECK (max_inflight BETWEEN 1 AND 64),
    max_per_second  real        NOT NULL DEFAULT 50 CHECK (max_per_second > 0 AND max_per_second <= 10000),
    -- The first failed attempt since the last success: failing for 5 days
    -- disables the endpoint.
    failing_since   timestamptz,
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant, id);

CREATE TABLE webhook_deliveries (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id uuid        NOT NULL REFERENCES webhook_endpoints (id),
    -- webhook-id: the CloudEvent id, the same on every attempt.
    msg_id      text        NOT NULL,
    event_type  text        NOT NULL,
    payment_id  uuid,
    body        bytea       NOT NULL,
    -- When the notification was made: delivery lag is measured from it.
    noted_at    timestamptz NOT NULL,
    state       text        NOT NULL DEFAULT 'WAITING' CHECK (state IN ('WAITING', 'DELIVERED', 'UNDELIVERED')),
    attempts    integer     NOT NULL DEFAULT 0,
    -- A WAITING delivery is due at next_at; a claimed one holds next_at =
    -- lease_until, so a dispatcher that dies leaves it due again then.
    next_at     timestamptz NOT NULL,
    lease_until timestamptz,
    last_status integer,
    last_error  text,
    done_at     timestamptz,
    UNIQUE (endpoint_id, msg_id)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (endpoint_id, next_at, id) WHERE state = 'WAITING';
-- The claim counts each endpoint's leased deliveries (its room) here, not
-- among all its waiting ones.
CREATE INDEX webhook_deliveries_leased_idx ON webhook_deliveries (endpoint_id, lease_until)
    WHERE state = 'WAITING' AND lease_until IS NOT NULL;
CREATE INDEX webhook_deliveries_payment_idx ON webhook_deliveries (payment_id);
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (endpoint_id, noted_at) WHERE state = 'UNDELIVERED';

CREATE TABLE webhook_attempts (
    delivery_id bigint      NOT NULL REFERENCES webhook_deliveries (id),
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

GRANT SELECT ON webhook_endpoints TO paysched_webhooks;
GRANT UPDATE (enabled, failing_since, disabled_reason, secrets, rotate_until, updated_at) ON webhook_endpoints TO paysched_webhooks;
GRANT SELECT, INSERT ON webhook_deliveries TO paysched_webhooks;
GRANT UPDATE (state, attempts, next_at, lease_until, last_status, last_error, done_at) ON webhook_deliveries TO paysched_webhooks;
GRANT INSERT, SELECT ON webhook_attempts TO paysched_webhooks;
-- The fan-out reads whose a payment is.
GRANT SELECT (id, tenant) ON payment_index TO paysched_webhooks;

-- The admin API manages endpoints, resends and recovers.
GRANT SELECT, INSERT ON webhook_endpoints TO paysched_admin;
GRANT UPDATE (url, event_types, description, enabled, secrets, rotate_until, max_inflight, max_per_second,
              failing_since, disabled_reason, updated_at) ON webhook_endpoints TO paysched_admin;
GRANT SELECT ON webhook_deliveries, webhook_attempts TO paysched_admin;
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
        UPDATE webhook_endpoints SET secrets = ARRAY[p_secret, secrets[1]], rotate_until = now() + p_overlap, updated_at = now()
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
GRANT UPDATE (enabled, failing_since, disabled_reason, updated_at) ON webhook_endpoints TO paysched_api;
GRANT SELECT ON webhook_deliveries, webhook_attempts TO paysched_api;
GRANT UPDATE (state, next_at, lease_until, done_at) ON webhook_deliveries TO paysched_api;
