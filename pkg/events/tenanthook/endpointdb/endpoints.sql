-- name: LockTenantEndpoints :exec
-- Creates of one tenant take turns, so two sent at the limit cannot both
-- count under it. The lock is a statement of its own: the count's starts
-- after it is granted and (read committed) sees every endpoint committed
-- before. Two tenants whose names hash alike only take turns too; an int4
-- key never meets the migrations' 7_202_611_30x locks.
SELECT pg_advisory_xact_lock(hashtext('webhook-endpoints:' || @tenant::text));

-- name: CreateEndpoint :many
-- Adds the endpoint unless its tenant has max of them already (no row).
INSERT INTO webhook_endpoints (id, tenant, url, event_types, description, max_inflight, max_per_second, secrets)
SELECT @id::uuid, @tenant::text, @url::text, @event_types::text[], @description::text, @max_inflight::integer,
       @max_per_second::real, ARRAY[@secret::text]
WHERE (SELECT count(*) FROM webhook_endpoints w WHERE w.tenant = @tenant::text) < @max::bigint
RETURNING id, tenant, url, event_types, description, enabled, max_inflight, max_per_second,
          coalesce(disabled_reason, '')::text AS disabled_reason, failing_since, rotate_until, created_at;

-- name: ListEndpoints :many
-- A tenant's endpoints (an empty tenant: every tenant's), at most 500.
SELECT id, tenant, url, event_types, description, enabled, max_inflight, max_per_second,
       coalesce(disabled_reason, '')::text AS disabled_reason, failing_since, rotate_until, created_at
FROM webhook_endpoints WHERE @tenant::text = '' OR tenant = @tenant::text ORDER BY tenant, id LIMIT 500;

-- name: GetEndpoint :many
SELECT id, tenant, url, event_types, description, enabled, max_inflight, max_per_second,
       coalesce(disabled_reason, '')::text AS disabled_reason, failing_since, rotate_until, created_at
FROM webhook_endpoints WHERE id = @id;

-- name: SetEnabled :execrows
-- Enabling clears the failure clock and the reason it was disabled.
UPDATE webhook_endpoints SET enabled = @enabled::boolean,
    failing_since = CASE WHEN @enabled::boolean THEN NULL ELSE failing_since END,
    disabled_reason = CASE WHEN @enabled::boolean THEN NULL ELSE 'disabled by its owner' END
WHERE id = @id AND (@tenant::text = '' OR tenant = @tenant::text);

-- name: RotateSecret :one
-- The owner's function: the caller need not read the secrets.
SELECT paysched_webhook_rotate(@id::uuid, @tenant::text, @secret::text, @overlap::interval)::boolean AS found;

-- name: EndpointExists :one
SELECT EXISTS (SELECT 1 FROM webhook_endpoints WHERE id = @id AND (@tenant::text = '' OR tenant = @tenant::text));
