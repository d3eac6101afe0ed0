package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MaxBulk is the most payments one request acts on.
const MaxBulk = 10000

// Identity is who acts: Operator is compared (an identity provider's
// issuer and subject, "dev:<name>" for the console's local login, or
// "token:<issuer>#<subject>" for an API token), Name is shown, never
// compared.
type Identity struct{ Operator, Name string }

// Amounts are a selection's payments in one currency.
type Amounts struct {
	Count int
	Total int64
	Max   int64
}

// Selection is what an action would act on, pinned.
type Selection struct {
	IDs []uuid.UUID
	// Attempts: each payment's attempt when selected.
	Attempts []int32
	// Amounts, per currency: never added across currencies.
	Amounts map[string]*Amounts
	// Capped: more matched than MaxBulk.
	Capped bool
}

// Add adds one payment to s.
func (s *Selection) Add(id uuid.UUID, attempt int32, amount int64, currency string) {
	if s.Amounts == nil {
		s.Amounts = map[string]*Amounts{}
	}
	s.IDs = append(s.IDs, id)
	s.Attempts = append(s.Attempts, attempt)
	a := s.Amounts[currency]
	if a == nil {
		a = &Amounts{}
		s.Amounts[currency] = a
	}
	a.Count++
	a.Total += amount
	a.Max = max(a.Max, amount)
}

// totals is the total in each currency.
func (s Selection) totals() map[string]int64 {
	out := make(map[string]int64, len(s.Amounts))
	for cur, a := range s.Amounts {
		out[cur] = a.Total
	}
	return out
}

// Request is an operator's action on one or more payments.
type Request struct {
	ID     int64
	Action string
	IDs    []uuid.UUID
	// Attempts pins each of IDs: the attempt it was at when requested
	// (nil for requests made before version 16). A payment no longer as
	// pinned is skipped.
	Attempts    []int32
	Filter      string
	AmountTotal int64
	AmountMax   int64
	// Amounts is the total in each currency (minor units).
	Amounts map[string]int64
	Reason  string
	// RunAt is a RESCHEDULE's new run time, fixed when requested.
	RunAt *time.Time
	// RequestedBy and DecidedBy are identities (Identity.Operator): what
	// four eyes compare. The names beside them are shown, never compared.
	RequestedBy   string
	RequestedName string
	RequestedAt   time.Time
	NeedsApproval bool
	DecidedBy     string
	DecidedName   string
	DecidedAt     *time.Time
	State         string
	Done, Failed  int
	// Skipped counts payments changed since the request: not acted on.
	Skipped    int
	Errors     []string
	FinishedAt *time.Time
	// ExpiresAt: undecided or unrun by then, it does nothing (nil: never,
	// a request made before version 26).
	ExpiresAt *time.Time
	// Via is where it was made: console or api.
	Via string
}

// Total is how many payments it acts on.
func (r *Request) Total() int { return len(r.IDs) }

// Percent is its progress.
func (r *Request) Percent() int {
	if len(r.IDs) == 0 {
		return 100
	}
	return (r.Done + r.Failed + r.Skipped) * 100 / len(r.IDs)
}

// Pin is the attempt IDs[i] was pinned at; -1 for a request made before
// pins.
func (r *Request) Pin(i int) int32 {
	if i < len(r.Attempts) {
		return r.Attempts[i]
	}
	return -1
}

// note keeps the last 50 refusals and skips.
func (r *Request) note(s string) {
	r.Errors = append(r.Errors, s)
	if len(r.Errors) > 50 {
		r.Errors = r.Errors[len(r.Errors)-50:]
	}
}

// Errors a decision or a read may answer.
var (
	ErrNotFound = errors.New("no such request")
	// ErrOwnRequest: the decider is the requester (by identity).
	ErrOwnRequest = errors.New("it is your own request: a second admin must decide")
	// ErrNotAwaiting: it was decided already, or expired.
	ErrNotAwaiting = errors.New("it is not awaiting approval (decided already, or expired)")
)

// Requests is the requests' store, their policy and their runner.
type Requests struct {
	db     *pgxpool.Pool
	policy Policy
	log    *slog.Logger
}

// New returns the requests of db under policy.
func New(db *pgxpool.Pool, policy Policy, log *slog.Logger) (*Requests, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	return &Requests{db: db, policy: policy, log: log}, nil
}

// Policy is the policy requests are made under.
func (q *Requests) Policy() Policy { return q.policy }

const insertSQL = `
INSERT INTO console_requests (action, ids, filter, amount_total, amount_max, reason, requested_by, requested_name, needs_approval, state,
                              attempts, amounts, run_at, expires_at, via)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, now() + $14::interval, $15)
RETURNING id`

// RunningOf reads who's running totals: their requests that needed no
// approval within the window.
func (q *Requests) RunningOf(ctx context.Context, who string) (Running, error) {
	return runningOf(ctx, q.db, who, q.policy.Window)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func runningOf(ctx context.Context, db querier, who string, window time.Duration) (Running, error) {
	r := Running{Totals: map[string]int64{}}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM console_requests
		WHERE requested_by = $1 AND NOT needs_approval AND requested_at > now() - $2::interval`, who, window).Scan(&r.Count); err != nil {
		return r, fmt.Errorf("running totals: %w", err)
	}
	rows, err := db.Query(ctx, `SELECT a.key, sum(a.value::bigint)::bigint
		FROM console_requests q, jsonb_each_text(q.amounts) a
		WHERE q.requested_by = $1 AND NOT q.needs_approval AND q.requested_at > now() - $2::interval
		GROUP BY a.key`, who, window)
	if err != nil {
		return r, fmt.Errorf("running totals: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var cur string
		var total int64
		if err := rows.Scan(&cur, &total); err != nil {
			return r, fmt.Errorf("running totals: %w", err)
		}
		r.Totals[cur] = total
	}
	return r, rows.Err()
}

// NewRequest is what an operator asks for.
type NewRequest struct {
	Action, Filter, Reason string
	RunAt                  *time.Time
	Who                    Identity
	Sel                    Selection
	// Via: console or api.
	Via string
}

// Create records an action. Whether it needs a second identity is decided
// with the requester's running totals read in the same transaction, under
// a lock of its own per operator: two of their actions sent at once are
// counted one after the other, never both against the total before
// either. It answers the request's id and whether it awaits approval (if
// not, it is QUEUED: a runner, or RunOne, applies it).
func (q *Requests) Create(ctx context.Context, n NewRequest) (int64, bool, error) {
	if _, ok := Actions[n.Action]; !ok {
		return 0, false, fmt.Errorf("create request: unknown action %q", n.Action)
	}
	if len(n.Sel.IDs) == 0 || len(n.Sel.IDs) > MaxBulk {
		return 0, false, fmt.Errorf("create request: between 1 and %d payments, got %d", MaxBulk, len(n.Sel.IDs))
	}
	if n.Via == "" {
		n.Via = "console"
	}
	var id int64
	var need bool
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7202611303))`, n.Who.Operator); err != nil {
			return err
		}
		r, err := runningOf(ctx, tx, n.Who.Operator, q.policy.Window)
		if err != nil {
			return err
		}
		need = q.policy.Needs(n.Action, n.Sel, r)
		// QUEUED: runs without a second identity (the policy lets one
		// admin take it); APPROVED is only ever a second identity's word.
		state := "QUEUED"
		if need {
			state = "AWAITING_APPROVAL"
		}
		var total, largest int64
		for _, a := range n.Sel.Amounts {
			total += a.Total
			largest = max(largest, a.Max)
		}
		return tx.QueryRow(ctx, insertSQL, n.Action, n.Sel.IDs, n.Filter, total, largest, n.Reason, n.Who.Operator, n.Who.Name, need, state,
			n.Sel.Attempts, n.Sel.totals(), n.RunAt, q.policy.Expiry, n.Via).Scan(&id)
	})
	if err != nil {
		return 0, false, fmt.Errorf("create request: %w", err)
	}
	q.log.Info("approval: request", "id", id, "action", n.Action, "payments", len(n.Sel.IDs), "operator", n.Who.Name,
		"identity", n.Who.Operator, "needs_approval", need, "via", n.Via)
	return id, need, nil
}

const requestCols = `id, action, ids, attempts, filter, amount_total, amount_max, amounts, reason, requested_by,
       coalesce(requested_name, requested_by), requested_at, needs_approval, coalesce(decided_by, ''),
       coalesce(decided_name, decided_by, ''), decided_at, state, done, failed, skipped, errors, finished_at, run_at, expires_at, via`

func scanRequest(row pgx.Row) (*Request, error) {
	var r Request
	err := row.Scan(&r.ID, &r.Action, &r.IDs, &r.Attempts, &r.Filter, &r.AmountTotal, &r.AmountMax, &r.Amounts, &r.Reason,
		&r.RequestedBy, &r.RequestedName, &r.RequestedAt, &r.NeedsApproval, &r.DecidedBy, &r.DecidedName, &r.DecidedAt,
		&r.State, &r.Done, &r.Failed, &r.Skipped, &r.Errors, &r.FinishedAt, &r.RunAt, &r.ExpiresAt, &r.Via)
	return &r, err
}

// Get reads request id (ErrNotFound).
func (q *Requests) Get(ctx context.Context, id int64) (*Request, error) {
	return one(q.db.QueryRow(ctx, `SELECT `+requestCols+` FROM console_requests WHERE id = $1`, id), scanRequest, "request", id)
}

// one is a request read by its id: ErrNotFound when there is none.
func one[T any](row pgx.Row, scan func(pgx.Row) (*T, error), what string, id int64) (*T, error) {
	r, err := scan(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %d: %w", what, id, err)
	}
	return r, nil
}

// undecided is why a decision found no request to decide, once the
// request was read: it is the decider's own (by identity), or it is no
// longer awaiting approval (decided, or expired).
func undecided(requestedBy string, by Identity) error {
	if requestedBy == by.Operator {
		return ErrOwnRequest
	}
	return ErrNotAwaiting
}

// List is the open requests (oldest first, at most 200), then the latest
// 50 closed ones.
func (q *Requests) List(ctx context.Context) ([]*Request, error) {
	rows, err := q.db.Query(ctx, `
(SELECT `+requestCols+` FROM console_requests WHERE state IN ('AWAITING_APPROVAL', 'APPROVED', 'QUEUED', 'RUNNING') ORDER BY id LIMIT 200)
UNION ALL
(SELECT `+requestCols+` FROM console_requests WHERE state IN ('DONE', 'REJECTED', 'EXPIRED') ORDER BY id DESC LIMIT 50)`)
	return collect(rows, err, scanRequest, "list requests")
}

// collect reads every row of a query (rows, err) with scan.
func collect[T any](rows pgx.Rows, err error, scan func(pgx.Row) (*T, error), what string) ([]*T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// decideSQL approves or rejects a request awaiting approval and not
// expired, comparing identities, never names: two people of one name are
// two operators, one person renamed is one. The database refuses the
// requester as decider too (a CHECK), so four eyes hold even against a
// bug here.
const decideSQL = `
UPDATE console_requests SET state = $2, decided_by = $3, decided_name = $4, decided_at = now()
WHERE id = $1 AND state = 'AWAITING_APPROVAL' AND requested_by <> $3 AND (expires_at IS NULL OR expires_at > now())
RETURNING id`

// Decide approves or rejects request id as by (ErrOwnRequest,
// ErrNotAwaiting, ErrNotFound).
func (q *Requests) Decide(ctx context.Context, id int64, approve bool, by Identity) error {
	state := "REJECTED"
	if approve {
		state = "APPROVED"
	}
	var got int64
	err := q.db.QueryRow(ctx, decideSQL, id, state, by.Operator, by.Name).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		r, gerr := q.Get(ctx, id)
		if gerr != nil {
			return gerr
		}
		return undecided(r.RequestedBy, by)
	}
	if err != nil {
		return fmt.Errorf("decide request %d: %w", id, err)
	}
	q.log.Info("approval: request decided", "id", id, "state", state, "operator", by.Name, "identity", by.Operator)
	return nil
}

// expireSQL closes the requests whose time ran out before they ran.
const expireSQL = `
UPDATE console_requests SET state = 'EXPIRED', finished_at = now()
WHERE state IN ('AWAITING_APPROVAL', 'APPROVED', 'QUEUED') AND expires_at <= now()
RETURNING id`

// Expire closes the requests whose time ran out.
func (q *Requests) Expire(ctx context.Context) (int, error) {
	rows, err := q.db.Query(ctx, expireSQL)
	if err != nil {
		return 0, fmt.Errorf("expire requests: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("expire requests: %w", err)
	}
	for _, id := range ids {
		q.log.Info("approval: request expired", "id", id)
	}
	if _, err := q.db.Exec(ctx, `UPDATE tenant_limit_requests SET state = 'EXPIRED'
		WHERE state = 'AWAITING_APPROVAL' AND expires_at <= now()`); err != nil {
		return len(ids), fmt.Errorf("expire limit requests: %w", err)
	}
	if _, err := q.db.Exec(ctx, `UPDATE endpoint_requests SET state = 'EXPIRED'
		WHERE state = 'AWAITING_APPROVAL' AND expires_at <= now()`); err != nil {
		return len(ids), fmt.Errorf("expire endpoint requests: %w", err)
	}
	if _, err := q.db.Exec(ctx, `UPDATE schedule_requests SET state = 'EXPIRED'
		WHERE state IN ('AWAITING_APPROVAL', 'APPROVED') AND expires_at <= now()`); err != nil {
		return len(ids), fmt.Errorf("expire schedule requests: %w", err)
	}
	return len(ids), nil
}
