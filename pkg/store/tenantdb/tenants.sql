-- name: TenantLimits :many
-- Every tenant's limits: a row only for a tenant an operator set, so few.
SELECT * FROM tenant_limits ORDER BY tenant;

-- name: TenantLimitsAfter :many
SELECT * FROM tenant_limits
WHERE tenant > @after ORDER BY tenant LIMIT @max;

-- name: TenantLimitsOf :many
SELECT * FROM tenant_limits WHERE tenant = @tenant;

-- name: SetTenantLimits :exec
INSERT INTO tenant_limits (tenant, weight, max_inflight, max_rate, updated_by) VALUES (@tenant, @weight, @max_inflight, @max_rate, @updated_by)
ON CONFLICT (tenant) DO UPDATE SET weight = EXCLUDED.weight, max_inflight = EXCLUDED.max_inflight,
    max_rate = EXCLUDED.max_rate, updated_by = EXCLUDED.updated_by, updated_at = now();

-- name: TenantsInFlight :many
-- The tenants' PROCESSING payments: every leased row, grouped (bounded by
-- the claims out). bound (store.DueBound) keeps later partitions out of
-- the plan.
SELECT tenant, count(*) AS n FROM payments WHERE lease_until IS NOT NULL AND status = 'PROCESSING'
AND tenant = ANY(@tenants::text[]) AND due_time <= @bound GROUP BY tenant;

-- name: TenantsDue :many
-- Each tenant's due rows (counted up to max) and how long its oldest has
-- waited, through payments_tenant_sweep_idx.
SELECT t.tenant::text AS tenant,
       (SELECT count(*) FROM (SELECT 1 FROM payments p WHERE p.tenant = t.tenant AND p.status = 'PENDING'
                              AND p.due_time <= now() AND p.due_time <= @bound AND p.run_at <= now() LIMIT @max) x) AS due,
       coalesce((SELECT extract(epoch FROM now() - min(p.run_at)) FROM payments p WHERE p.tenant = t.tenant
                 AND p.status = 'PENDING' AND p.due_time <= now() AND p.due_time <= @bound AND p.run_at <= now()), 0)::float8 AS late_s
FROM unnest(@tenants::text[]) AS t(tenant);

-- name: TenantNextDay :one
-- A tenant's PENDING rows falling due within a day, bounded.
SELECT count(*) FROM (SELECT 1 FROM payments WHERE tenant = @tenant AND status = 'PENDING'
AND run_at > now() AND run_at <= now() + interval '24 hours' AND due_time <= @bound LIMIT @max) x;

-- name: TenantQueuedAt :one
SELECT next_at FROM tenant_queue WHERE tenant = @tenant;
