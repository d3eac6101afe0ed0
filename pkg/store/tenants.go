package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store/tenantdb"
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
	rows, err := tenantdb.New(db).TenantLimits(ctx)
	if err != nil {
		return nil, fmt.Errorf("load tenant limits: %w", err)
	}
	return limitsOf(rows), nil
}

// limitsOf is tenant_limits' rows as TenantLimits.
func limitsOf(rows []tenantdb.TenantLimit) []TenantLimits {
	out := make([]TenantLimits, len(rows))
	for i, row := range rows {
		out[i] = TenantLimits{Tenant: row.Tenant, Weight: int(row.Weight), MaxRate: row.MaxRate, UpdatedBy: row.UpdatedBy}
		if row.MaxInflight != nil {
			n := int(*row.MaxInflight)
			out[i].MaxInflight = &n
		}
	}
	return out
}

// SetTenantLimits writes one tenant's limits (by whom, for the record).
func SetTenantLimits(ctx context.Context, db pgdb.DB, l TenantLimits) error {
	var inflight *int32
	if l.MaxInflight != nil {
		n := int32(*l.MaxInflight)
		inflight = &n
	}
	err := tenantdb.New(db).SetTenantLimits(ctx, tenantdb.SetTenantLimitsParams{Tenant: l.Tenant, Weight: int32(l.Weight),
		MaxInflight: inflight, MaxRate: l.MaxRate, UpdatedBy: l.UpdatedBy})
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

// ListTenants lists, in name order after after, at most limit tenants that
// have due payments or limits set, and says where the next page starts
// ("" when there is none). Every read is bounded: a bounded walk of the
// tenant index, a bounded count per tenant, and the in-flight rows.
func ListTenants(ctx context.Context, db pgdb.DB, after string, limit int) ([]TenantState, string, error) {
	w, err := (&Claimer{DB: db}).WalkTenants(ctx, after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: %w", err)
	}
	q := tenantdb.New(db)
	setRows, err := q.TenantLimitsAfter(ctx, tenantdb.TenantLimitsAfterParams{After: after, Max: int32(limit)})
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: %w", err)
	}
	set := limitsOf(setRows)
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
	dues, err := q.TenantsDue(ctx, tenantdb.TenantsDueParams{Tenants: names, Max: MaxCounted, Bound: bound})
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: count due: %w", err)
	}
	for _, d := range dues {
		out[at[d.Tenant]].Due, out[at[d.Tenant]].Lateness = d.Due, time.Duration(d.LateS*float64(time.Second))
	}
	// In flight: every leased row, grouped (bounded by the claims out).
	flying, err := q.TenantsInFlight(ctx, tenantdb.TenantsInFlightParams{Tenants: names, Bound: bound})
	if err != nil {
		return nil, "", fmt.Errorf("list tenants: in flight: %w", err)
	}
	for _, f := range flying {
		out[at[f.Tenant]].InFlight = f.N
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

// ReadTenant reads one tenant's detail: each read is bounded (counts stop
// at MaxCounted; in flight reads the leased rows).
func ReadTenant(ctx context.Context, db pgdb.DB, tenant string) (TenantDetail, error) {
	d := TenantDetail{TenantState: TenantState{Tenant: tenant}}
	q := tenantdb.New(db)
	now := time.Now()
	dues, err := q.TenantsDue(ctx, tenantdb.TenantsDueParams{Tenants: []string{tenant}, Max: MaxCounted, Bound: DueBound(now)})
	if err != nil {
		return d, fmt.Errorf("read tenant %q: due: %w", tenant, err)
	}
	if len(dues) == 1 {
		d.Due, d.Lateness = dues[0].Due, time.Duration(dues[0].LateS*float64(time.Second))
	}
	// A payment runs at or after its due time: due within the day.
	if d.Next24h, err = q.TenantNextDay(ctx, tenantdb.TenantNextDayParams{Tenant: tenant, Max: MaxCounted,
		Bound: DueBound(now.Add(24 * time.Hour))}); err != nil {
		return d, fmt.Errorf("read tenant %q: next day: %w", tenant, err)
	}
	flying, err := q.TenantsInFlight(ctx, tenantdb.TenantsInFlightParams{Tenants: []string{tenant}, Bound: DueBound(now)})
	if err != nil {
		return d, fmt.Errorf("read tenant %q: in flight: %w", tenant, err)
	}
	if len(flying) == 1 {
		d.InFlight = flying[0].N
	}
	switch at, err := q.TenantQueuedAt(ctx, tenant); {
	case err == nil:
		d.QueuedAt = &at
	case !errors.Is(err, pgx.ErrNoRows):
		return d, fmt.Errorf("read tenant %q: queue: %w", tenant, err)
	}
	rows, err := q.TenantLimitsOf(ctx, tenant)
	if err != nil {
		return d, fmt.Errorf("read tenant %q: limits: %w", tenant, err)
	}
	if ls := limitsOf(rows); len(ls) == 1 {
		d.Limits = &ls[0]
	}
	return d, nil
}
