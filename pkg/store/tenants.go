package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// DefaultTenant is the tenant of a payment created without one: the
// payments API's default for tokens with no tenant claim (auth.DefaultTenant).
const DefaultTenant = "default"

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
func LoadTenantLimits(ctx context.Context, db pgdb.DB) ([]TenantLimits, error) {
	out, err := queryLimits(ctx, db, `SELECT tenant, weight, max_inflight, max_rate, updated_by FROM tenant_limits ORDER BY tenant`)
	if err != nil {
		return nil, fmt.Errorf("load tenant limits: %w", err)
	}
	return out, nil
}

// queryLimits runs a query of tenant_limits' columns (tenant, weight,
// max_inflight, max_rate, updated_by) and collects the rows.
func queryLimits(ctx context.Context, db pgdb.DB, sql string, args ...any) ([]TenantLimits, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (TenantLimits, error) {
		var l TenantLimits
		err := r.Scan(&l.Tenant, &l.Weight, &l.MaxInflight, &l.MaxRate, &l.UpdatedBy)
		return l, err
	})
}

// SetTenantLimits writes one tenant's limits (by whom, for the record).
func SetTenantLimits(ctx context.Context, db pgdb.DB, l TenantLimits) error {
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

// TenantState is one tenant as operators see it.
type TenantState struct {
	Tenant string
	// Due counts its PENDING payments due now (up to MaxCounted).
	Due int64
	// InFlight counts its PROCESSING payments.
	InFlight int64
	// Lateness is how long its oldest due PENDING payment has waited.
	Lateness time.Duration
	// Limits is what an operator set; nil when nothing was.
	Limits *TenantLimits
}

// tenantInFlightSQL counts the tenants' ($1) PROCESSING payments: every
// leased row, grouped (bounded by the claims out).
const tenantInFlightSQL = `SELECT tenant, count(*) FROM payments WHERE lease_until IS NOT NULL AND status = 'PROCESSING'
AND tenant = ANY($1) AND due_time <= $2 GROUP BY tenant`

// PlanningSlack widens a bound on due_time that a statement passes only so
// that its plan leaves out the partitions beyond it (see DueBound).
const PlanningSlack = 10 * time.Minute

// DueBound is the due_time bound, as a parameter, of a statement about
// rows due by at: at plus PlanningSlack (the database's clock may be
// ahead of ours). Without a bound given as a value, a statement whose
// range is in now() plans every partition of the horizon, a year of them
// made ahead, on every call under admin-api's custom plans: ~350 ms of
// planning for the console's tenant pages at 5M.
func DueBound(at time.Time) time.Time { return at.Add(PlanningSlack) }

// MaxCounted bounds how many due rows of one tenant ListTenants counts.
const MaxCounted = 1_000_000

// tenantDueSQL counts each tenant's due rows (bounded) and finds its
// oldest, through payments_tenant_sweep_idx.
const tenantDueSQL = `
SELECT t.tenant,
       (SELECT count(*) FROM (SELECT 1 FROM payments p WHERE p.tenant = t.tenant AND p.status = 'PENDING'
                              AND p.due_time <= now() AND p.due_time <= $3 AND p.run_at <= now() LIMIT $2) x),
       coalesce((SELECT extract(epoch FROM now() - min(p.run_at)) FROM payments p WHERE p.tenant = t.tenant
                 AND p.status = 'PENDING' AND p.due_time <= now() AND p.due_time <= $3 AND p.run_at <= now()), 0)::float8
FROM unnest($1::text[]) AS t(tenant)`

// ListTenants lists, in name order after after, at most limit tenants that
// have due payments or limits set, and says where the next page starts
// ("" when there is none). Every read is bounded: a bounded walk of the
// tenant index, a bounded count per tenant, and the in-flight rows.
func ListTenants(ctx context.Context, db pgdb.DB, after string, limit int) ([]TenantState, string, error) {
	w, err := (&Claimer{DB: db}).WalkTenants(ctx, after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: %w", err)
	}
	set, err := queryLimits(ctx, db, `SELECT tenant, weight, max_inflight, max_rate, updated_by FROM tenant_limits
		WHERE tenant > $1 ORDER BY tenant LIMIT $2`, after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: %w", err)
	}
	byName := map[string]*TenantLimits{}
	names := append([]string(nil), w.Due...)
	for i := range set {
		byName[set[i].Tenant] = &set[i]
		if _, due := w.DueIn[set[i].Tenant]; !due {
			names = append(names, set[i].Tenant)
		}
	}
	slices.Sort(names)
	more := !w.Complete || len(set) == limit || len(names) > limit
	if len(names) > limit {
		names = names[:limit]
	}
	next := ""
	if more && len(names) > 0 {
		next = names[len(names)-1]
	}
	out := make([]TenantState, len(names))
	at := make(map[string]int, len(names))
	for i, n := range names {
		out[i], at[n] = TenantState{Tenant: n, Limits: byName[n]}, i
	}
	if len(names) == 0 {
		return out, next, nil
	}
	bound := DueBound(time.Now())
	rows, err := db.Query(ctx, tenantDueSQL, names, MaxCounted, bound)
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: count due: %w", err)
	}
	var name string
	var due int64
	var late float64
	if _, err := pgx.ForEachRow(rows, []any{&name, &due, &late}, func() error {
		out[at[name]].Due, out[at[name]].Lateness = due, time.Duration(late*float64(time.Second))
		return nil
	}); err != nil {
		return nil, "", fmt.Errorf("list tenants: count due: %w", err)
	}
	// In flight: every leased row, grouped (bounded by the claims out).
	rows, err = db.Query(ctx, tenantInFlightSQL, names, bound)
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: in flight: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&name, &due}, func() error {
		out[at[name]].InFlight = due
		return nil
	}); err != nil {
		return nil, "", fmt.Errorf("list tenants: in flight: %w", err)
	}
	return out, next, nil
}

// TenantDetail is one tenant as its console page shows it.
type TenantDetail struct {
	TenantState
	// Next24h counts its PENDING payments falling due within a day (up to
	// MaxCounted).
	Next24h int64
	// QueuedAt is when the sweepers next look at it (tenant_queue's
	// next_at; nil: it has nothing PENDING).
	QueuedAt *time.Time
}

// tenantNextSQL counts a tenant's PENDING rows due within a day, through
// payments_tenant_sweep_idx, bounded.
const tenantNextSQL = `SELECT count(*) FROM (SELECT 1 FROM payments WHERE tenant = $1 AND status = 'PENDING'
AND run_at > now() AND run_at <= now() + interval '24 hours' AND due_time <= $3 LIMIT $2) x`

// ReadTenant reads one tenant's detail: each read is bounded (counts stop
// at MaxCounted; in flight reads the leased rows).
func ReadTenant(ctx context.Context, db pgdb.DB, tenant string) (TenantDetail, error) {
	d := TenantDetail{TenantState: TenantState{Tenant: tenant}}
	var late float64
	var name string
	now := time.Now()
	if err := db.QueryRow(ctx, tenantDueSQL, []string{tenant}, MaxCounted, DueBound(now)).Scan(&name, &d.Due, &late); err != nil {
		return d, fmt.Errorf("read tenant %q: due: %w", tenant, err)
	}
	d.Lateness = time.Duration(late * float64(time.Second))
	// A payment runs at or after its due time: due within the day.
	if err := db.QueryRow(ctx, tenantNextSQL, tenant, MaxCounted, DueBound(now.Add(24*time.Hour))).Scan(&d.Next24h); err != nil {
		return d, fmt.Errorf("read tenant %q: next day: %w", tenant, err)
	}
	if err := db.QueryRow(ctx, tenantInFlightSQL, []string{tenant}, DueBound(now)).Scan(&name, &d.InFlight); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("read tenant %q: in flight: %w", tenant, err)
	}
	err := db.QueryRow(ctx, `SELECT next_at FROM tenant_queue WHERE tenant = $1`, tenant).Scan(&d.QueuedAt)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("read tenant %q: queue: %w", tenant, err)
	}
	ls, err := queryLimits(ctx, db, `SELECT tenant, weight, max_inflight, max_rate, updated_by FROM tenant_limits WHERE tenant = $1`, tenant)
	if err != nil {
		return d, fmt.Errorf("read tenant %q: limits: %w", tenant, err)
	}
	if len(ls) == 1 {
		d.Limits = &ls[0]
	}
	return d, nil
}
