package approval

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

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

const limitCols = `id, tenant, weight, max_inflight, max_rate, reason, state, requested_by, requested_name, requested_at,
       coalesce(decided_by, ''), coalesce(decided_name, ''), decided_at, expires_at`

func scanLimit(row pgx.Row) (*LimitRequest, error) {
	var l LimitRequest
	err := row.Scan(&l.ID, &l.Tenant, &l.Weight, &l.MaxInflight, &l.MaxRate, &l.Reason, &l.State, &l.RequestedBy, &l.RequestedName,
		&l.RequestedAt, &l.DecidedBy, &l.DecidedName, &l.DecidedAt, &l.ExpiresAt)
	return &l, err
}

// RequestLimits records who's change of l's tenant limits, awaiting a
// second identity: a limit change always takes four eyes, whatever the
// policy (a tenant's caps bound how fast its money moves).
func (q *Requests) RequestLimits(ctx context.Context, l store.TenantLimits, reason string, who Identity) (int64, error) {
	var id int64
	err := q.db.QueryRow(ctx, `INSERT INTO tenant_limit_requests (tenant, weight, max_inflight, max_rate, reason, requested_by, requested_name, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, now() + $8::interval) RETURNING id`,
		l.Tenant, l.Weight, l.MaxInflight, l.MaxRate, reason, who.Operator, who.Name, q.policy.Expiry).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("request limits of %q: %w", l.Tenant, err)
	}
	q.log.Info("approval: tenant limits requested", "id", id, "tenant", l.Tenant, "weight", l.Weight, "operator", who.Name, "identity", who.Operator)
	return id, nil
}

// decideLimitsSQL approves (APPLIED) or rejects a waiting, unexpired
// request, never the requester's own (compared by identity; a CHECK holds
// it too). tenant, when set, must be the request's.
const decideLimitsSQL = `
UPDATE tenant_limit_requests SET state = $2, decided_by = $3, decided_name = $4, decided_at = now()
WHERE id = $1 AND ($5 = '' OR tenant = $5) AND state = 'AWAITING_APPROVAL' AND requested_by <> $3
  AND (expires_at IS NULL OR expires_at > now())
RETURNING tenant, weight, max_inflight, max_rate, requested_name`

// DecideLimits applies (or rejects) limit request id as by, the limits
// written in the same transaction as the decision, which names the
// request to the database (0026 refuses the admin role's write
// otherwise). tenant, when set, must be the request's.
func (q *Requests) DecideLimits(ctx context.Context, id int64, tenant string, approve bool, by Identity) error {
	state := "REJECTED"
	if approve {
		state = "APPLIED"
	}
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		var l store.TenantLimits
		var requester string
		if err := tx.QueryRow(ctx, decideLimitsSQL, id, state, by.Operator, by.Name, tenant).Scan(&l.Tenant, &l.Weight, &l.MaxInflight,
			&l.MaxRate, &requester); err != nil {
			return err
		}
		if state != "APPLIED" {
			return nil
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('paysched.limit_request', $1, true)`, strconv.FormatInt(id, 10)); err != nil {
			return err
		}
		l.UpdatedBy = "admin:" + requester + ", approved by " + by.Name
		return store.SetTenantLimits(ctx, tx, l)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		l, gerr := q.GetLimits(ctx, id)
		switch {
		case gerr != nil:
			return gerr
		case tenant != "" && l.Tenant != tenant:
			return ErrNotFound
		}
		return undecided(l.RequestedBy, by)
	}
	if err != nil {
		return fmt.Errorf("decide limits %d: %w", id, err)
	}
	q.log.Info("approval: tenant limits decided", "request", id, "state", state, "operator", by.Name, "identity", by.Operator)
	return nil
}

// GetLimits reads limit request id (ErrNotFound).
func (q *Requests) GetLimits(ctx context.Context, id int64) (*LimitRequest, error) {
	return one(q.db.QueryRow(ctx, `SELECT `+limitCols+` FROM tenant_limit_requests WHERE id = $1`, id), scanLimit, "limit request", id)
}

// ListLimits is the limit requests awaiting approval, then the latest 50
// decided.
func (q *Requests) ListLimits(ctx context.Context) ([]*LimitRequest, error) {
	rows, err := q.db.Query(ctx, `
(SELECT `+limitCols+` FROM tenant_limit_requests WHERE state = 'AWAITING_APPROVAL' ORDER BY id LIMIT 200)
UNION ALL
(SELECT `+limitCols+` FROM tenant_limit_requests WHERE state <> 'AWAITING_APPROVAL' ORDER BY id DESC LIMIT 50)`)
	return collect(rows, err, scanLimit, "list limit requests")
}
