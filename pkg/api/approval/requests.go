package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/api/approval/approvaldb"
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

// RunningOf reads who's running totals: their requests that needed no
// approval within the window.
func (q *Requests) RunningOf(ctx context.Context, who string) (Running, error) {
	return runningOf(ctx, q.db, who, q.policy.Window)
}

func runningOf(ctx context.Context, db approvaldb.DBTX, who string, window time.Duration) (Running, error) {
	r := Running{Totals: map[string]int64{}}
	all, err := approvaldb.New(db).RunningAmounts(ctx, approvaldb.RunningAmountsParams{Who: who, TimeWindow: window})
	if err != nil {
		return r, fmt.Errorf("running totals: %w", err)
	}
	r.Count = len(all)
	for _, b := range all {
		var amounts map[string]int64
		if err := json.Unmarshal(b, &amounts); err != nil {
			return r, fmt.Errorf("running totals: %w", err)
		}
		for cur, n := range amounts {
			r.Totals[cur] += n
		}
	}
	return r, nil
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
	policy := q.policy
	err := pgx.BeginFunc(ctx, q.db, func(tx pgx.Tx) error {
		q := approvaldb.New(tx)
		if err := q.LockOperator(ctx, n.Who.Operator); err != nil {
			return err
		}
		r, err := runningOf(ctx, tx, n.Who.Operator, policy.Window)
		if err != nil {
			return err
		}
		need = policy.Needs(n.Action, n.Sel, r)
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
		amounts, err := json.Marshal(n.Sel.totals())
		if err != nil {
			return err
		}
		id, err = q.CreateRequest(ctx, approvaldb.CreateRequestParams{Action: n.Action, Ids: n.Sel.IDs, Filter: n.Filter,
			AmountTotal: total, AmountMax: largest, Reason: n.Reason, RequestedBy: n.Who.Operator, RequestedName: n.Who.Name,
			NeedsApproval: need, State: state, Attempts: n.Sel.Attempts, Amounts: amounts, RunAt: n.RunAt, Expiry: policy.Expiry, Via: n.Via})
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("create request: %w", err)
	}
	q.log.Info("approval: request", "id", id, "action", n.Action, "payments", len(n.Sel.IDs), "operator", n.Who.Name,
		"identity", n.Who.Operator, "needs_approval", need, "via", n.Via)
	return id, need, nil
}

// fromRow is a request as package approval shows it: the names default
// to the identities they stand beside (requests made before version 16
// have none), and the amounts are decoded.
func fromRow(row approvaldb.ConsoleRequest) (*Request, error) {
	r := Request{ID: row.ID, Action: row.Action, IDs: row.Ids, Attempts: row.Attempts, Filter: row.Filter,
		AmountTotal: row.AmountTotal, AmountMax: row.AmountMax, Reason: row.Reason, RequestedBy: row.RequestedBy,
		RequestedName: or(row.RequestedName, row.RequestedBy), RequestedAt: row.RequestedAt, NeedsApproval: row.NeedsApproval,
		DecidedBy: or(row.DecidedBy, ""), DecidedAt: row.DecidedAt, State: row.State, Done: int(row.Done), Failed: int(row.Failed),
		Skipped: int(row.Skipped), Errors: row.Errors, FinishedAt: row.FinishedAt, RunAt: row.RunAt, ExpiresAt: row.ExpiresAt, Via: row.Via}
	r.DecidedName = or(row.DecidedName, r.DecidedBy)
	if err := json.Unmarshal(row.Amounts, &r.Amounts); err != nil {
		return nil, fmt.Errorf("request %d's amounts: %w", row.ID, err)
	}
	return &r, nil
}

// or is *s, or def when s is nil (SQL's coalesce).
func or(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

// Get reads request id (ErrNotFound).
func (q *Requests) Get(ctx context.Context, id int64) (*Request, error) {
	row, err := approvaldb.New(q.db).GetRequest(ctx, id)
	return one(row, err, fromRow, "request", id)
}

// one is a request read by its id (row, err), as convert makes it:
// ErrNotFound when there is none.
func one[R, T any](row R, err error, convert func(R) (*T, error), what string, id int64) (*T, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %d: %w", what, id, err)
	}
	return convert(row)
}

// decision is the state a decision leaves a request in: approved (yes,
// which differs by kind of request) or rejected.
func decision(approve bool, yes string) string {
	if approve {
		return yes
	}
	return "REJECTED"
}

// asked is any kind of request: who asked is told apart from its decider.
type asked interface{ requester() string }

func (r *Request) requester() string         { return r.RequestedBy }
func (r *ScheduleRequest) requester() string { return r.RequestedBy }
func (r *LimitRequest) requester() string    { return r.RequestedBy }
func (r *EndpointRequest) requester() string { return r.RequestedBy }

// decided is a decision's error, err its write's (what and id name the
// request, state is where the decision leaves it): a write that found no
// request to decide says why once get reads the request; a decision made
// is logged.
func decided[T asked](ctx context.Context, log *slog.Logger, err error, by Identity, what string, id int64, state string,
	get func(context.Context, int64) (T, error)) error {
	if errors.Is(err, pgx.ErrNoRows) {
		r, gerr := get(ctx, id)
		if gerr != nil {
			return gerr
		}
		return undecided(r.requester(), by)
	}
	if err != nil {
		return fmt.Errorf("decide %s %d: %w", what, id, err)
	}
	log.Info("approval: "+what+" decided", "id", id, "state", state, "operator", by.Name, "identity", by.Operator)
	return nil
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
	db := approvaldb.New(q.db)
	return both(ctx, db.OpenRequests, db.ClosedRequests, fromRow, "list requests")
}

// both reads the open rows, then the closed ones, as convert makes them.
func both[R, T any](ctx context.Context, open, closed func(context.Context) ([]R, error), convert func(R) (*T, error), what string) ([]*T, error) {
	rows, err := open(ctx)
	out, err := all(rows, err, convert, what)
	if err != nil {
		return nil, err
	}
	rows, err = closed(ctx)
	more, err := all(rows, err, convert, what)
	return append(out, more...), err
}

// all is rows (read with err) as convert makes them.
func all[R, T any](rows []R, err error, convert func(R) (*T, error), what string) ([]*T, error) {
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := make([]*T, 0, len(rows))
	for _, r := range rows {
		v, err := convert(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// Decide approves or rejects request id as by (ErrOwnRequest,
// ErrNotAwaiting, ErrNotFound).
func (q *Requests) Decide(ctx context.Context, id int64, approve bool, by Identity) error {
	state := decision(approve, "APPROVED")
	// Identities are compared, never names; the database refuses the
	// requester as decider too (approvaldb's DecideRequest).
	_, err := approvaldb.New(q.db).DecideRequest(ctx, approvaldb.DecideRequestParams{ID: id, State: state, DecidedBy: by.Operator, DecidedName: by.Name})
	return decided(ctx, q.log, err, by, "request", id, state, q.Get)
}

// Expire closes the requests whose time ran out.
func (q *Requests) Expire(ctx context.Context) (int, error) {
	db := approvaldb.New(q.db)
	ids, err := db.ExpireRequests(ctx)
	if err != nil {
		return 0, fmt.Errorf("expire requests: %w", err)
	}
	for _, id := range ids {
		q.log.Info("approval: request expired", "id", id)
	}
	if err := db.ExpireLimitRequests(ctx); err != nil {
		return len(ids), fmt.Errorf("expire limit requests: %w", err)
	}
	if err := db.ExpireEndpointRequests(ctx); err != nil {
		return len(ids), fmt.Errorf("expire endpoint requests: %w", err)
	}
	if err := db.ExpireScheduleRequests(ctx); err != nil {
		return len(ids), fmt.Errorf("expire schedule requests: %w", err)
	}
	return len(ids), nil
}
