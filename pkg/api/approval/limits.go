package approval

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/api/approval/approvaldb"
	"github.com/paysched/paysched/pkg/store"
)

// LimitRequest is a change of one tenant's weight and caps: it applies
// only once a second identity approves it (in the same transaction).
type LimitRequest struct {
	ID            int64
	Tenant        string
	Weight        int
	MaxInflight   *int
	MaxRate       *float64
	Reason        string
	State         string
	RequestedBy   string
	RequestedName string
	RequestedAt   time.Time
	DecidedBy     string
	DecidedName   string
	DecidedAt     *time.Time
	ExpiresAt     *time.Time
}

func fromLimitRow(row approvaldb.TenantLimitRequest) (*LimitRequest, error) {
	l := &LimitRequest{ID: row.ID, Tenant: row.Tenant, Weight: int(row.Weight), MaxRate: row.MaxRate, Reason: row.Reason,
		State: row.State, RequestedBy: row.RequestedBy, RequestedName: row.RequestedName, RequestedAt: row.RequestedAt,
		DecidedBy: or(row.DecidedBy, ""), DecidedName: or(row.DecidedName, ""), DecidedAt: row.DecidedAt, ExpiresAt: row.ExpiresAt}
	if row.MaxInflight != nil {
		n := int(*row.MaxInflight)
		l.MaxInflight = &n
	}
	return l, nil
}

// RequestLimits records who's change of l's tenant limits, awaiting a
// second identity: a limit change always takes four eyes, whatever the
// policy (a tenant's caps bound how fast its money moves).
func (q *Requests) RequestLimits(ctx context.Context, l store.TenantLimits, reason string, who Identity) (int64, error) {
	var inflight *int32
	if l.MaxInflight != nil {
		n := int32(*l.MaxInflight)
		inflight = &n
	}
	id, err := approvaldb.New(q.db).CreateLimitRequest(ctx, approvaldb.CreateLimitRequestParams{Tenant: l.Tenant, Weight: int32(l.Weight),
		MaxInflight: inflight, MaxRate: l.MaxRate, Reason: reason, RequestedBy: who.Operator, RequestedName: who.Name, Expiry: q.policy.Expiry})
	if err != nil {
		return 0, fmt.Errorf("request limits of %q: %w", l.Tenant, err)
	}
	q.log.Info("approval: tenant limits requested", "id", id, "tenant", l.Tenant, "weight", l.Weight, "operator", who.Name, "identity", who.Operator)
	return id, nil
}

// DecideLimits applies (or rejects) limit request id as by, the limits
// written in the same transaction as the decision, which names the
// request to the database (0026 refuses the admin role's write
// otherwise). tenant, when set, must be the request's.
func (q *Requests) DecideLimits(ctx context.Context, id int64, tenant string, approve bool, by Identity) error {
	state := decision(approve, "APPLIED")
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		// A waiting, unexpired request, never the requester's own
		// (compared by identity; a CHECK holds it too).
		db := approvaldb.New(tx)
		row, err := db.DecideLimitRequest(ctx, approvaldb.DecideLimitRequestParams{ID: id, State: state, DecidedBy: by.Operator,
			DecidedName: by.Name, OnlyTenant: tenant})
		if err != nil {
			return err
		}
		if state != "APPLIED" {
			return nil
		}
		if err := db.NameLimitRequest(ctx, strconv.FormatInt(id, 10)); err != nil {
			return err
		}
		l := store.TenantLimits{Tenant: row.Tenant, Weight: int(row.Weight), MaxRate: row.MaxRate,
			UpdatedBy: "admin:" + row.RequestedName + ", approved by " + by.Name}
		if row.MaxInflight != nil {
			n := int(*row.MaxInflight)
			l.MaxInflight = &n
		}
		return store.SetTenantLimits(ctx, tx, l)
	})
	return decided(ctx, q.log, err, by, "limit request", id, state, func(ctx context.Context, id int64) (*LimitRequest, error) {
		l, err := q.GetLimits(ctx, id)
		if err == nil && tenant != "" && l.Tenant != tenant {
			return nil, ErrNotFound
		}
		return l, err
	})
}

// GetLimits reads limit request id (ErrNotFound).
func (q *Requests) GetLimits(ctx context.Context, id int64) (*LimitRequest, error) {
	row, err := approvaldb.New(q.db).GetLimitRequest(ctx, id)
	return one(row, err, fromLimitRow, "limit request", id)
}

// ListLimits is the limit requests awaiting approval, then the latest 50
// decided.
func (q *Requests) ListLimits(ctx context.Context) ([]*LimitRequest, error) {
	db := approvaldb.New(q.db)
	return both(ctx, db.OpenLimitRequests, db.ClosedLimitRequests, fromLimitRow, "list limit requests")
}
