package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TenantLimits is what an operator set for one tenant (tenant_limits).
// A nil cap means the sweepers' default.
type TenantLimits struct {
	Tenant      string
	Weight      int
	MaxInflight *int
	MaxRate     *float64
	UpdatedBy   string
}

// LoadTenantLimits reads every tenant's limits. The table holds a row
// only for a tenant an operator set, so it stays small.
func LoadTenantLimits(ctx context.Context, db DB) ([]TenantLimits, error) {
	rows, err := db.Query(ctx, `SELECT tenant, weight, max_inflight, max_rate, updated_by FROM tenant_limits ORDER BY tenant`)
	if err != nil {
		return nil, fmt.Errorf("load tenant limits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TenantLimits, error) {
		var l TenantLimits
		err := r.Scan(&l.Tenant, &l.Weight, &l.MaxInflight, &l.MaxRate, &l.UpdatedBy)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("load tenant limits: %w", err)
	}
	return out, nil
}

// SetTenantLimits writes one tenant's limits (by whom, for the record).
func SetTenantLimits(ctx context.Context, db DB, l TenantLimits) error {
	_, err := db.Exec(ctx, `
INSERT INTO tenant_limits (tenant, weight, max_inflight, max_rate, updated_by) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant) DO UPDATE SET weight = EXCLUDED.weight, max_inflight = EXCLUDED.max_inflight,
    max_rate = EXCLUDED.max_rate, updated_by = EXCLUDED.updated_by, updated_at = now()`,
		l.Tenant, l.Weight, l.MaxInflight, l.MaxRate, l.UpdatedBy)
	if err != nil {
		return fmt.Errorf("set limits of tenant %q: %w", l.Tenant, err)
	}
	return nil
}
