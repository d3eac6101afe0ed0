package console

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/status"

	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// maxBulk is the most payments one request acts on.
const maxBulk = 10000

// Request is an operator's action on one or more dead letters, or on
// PENDING or HELD payments (actionFrom says which).
type Request struct {
	ID     int64
	Action string
	IDs    []uuid.UUID
	// Attempts pins each of IDs: the attempt its dead letter was at when
	// requested (nil for requests made before version 16). A payment no
	// longer dead-lettered at it is skipped.
	Attempts    []int32
	Filter      string
	AmountTotal int64
	AmountMax   int64
	// Amounts is the total in each currency (minor units).
	Amounts map[string]int64
	Reason  string
	// RunAt is a RESCHEDULE's new run time, fixed when requested.
	RunAt *time.Time
	// RequestedBy and DecidedBy are identities (Session.Operator): what
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
	// Skipped counts payments changed since the request (re-driven,
	// resolved, claimed and dead-lettered again): not acted on.
	Skipped    int
	Errors     []string
	FinishedAt *time.Time
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

// actions are the dead-letter actions, by name, and openActions those on
// a PENDING or a HELD payment; actionFrom is the status each acts on.
var (
	actions     = map[string]string{"REDRIVE": "re-drive", "RESOLVE": "resolve as failed", "CANCEL": "cancel"}
	openActions = map[payment.Status]map[string]string{
		payment.Pending: {"HOLD": "hold (the sweepers skip it)", "CANCEL_PENDING": "cancel",
			"RESCHEDULE": "reschedule (runs at the time given, never before its due time)",
			"RUN_NOW":    "run now (a payment past its due time, waiting on a backoff or a reschedule)"},
		payment.Held: {"RELEASE": "release (back to PENDING)", "CANCEL_HELD": "cancel"},
	}
	actionFrom = map[string]payment.Status{"REDRIVE": payment.DeadLettered, "RESOLVE": payment.DeadLettered,
		"CANCEL": payment.DeadLettered, "HOLD": payment.Pending, "CANCEL_PENDING": payment.Pending,
		"RELEASE": payment.Held, "CANCEL_HELD": payment.Held, "RESCHEDULE": payment.Pending, "RUN_NOW": payment.Pending}
)

// actionName is how an action reads.
func actionName(a string) string {
	if n, ok := actions[a]; ok {
		return n
	}
	return openActions[actionFrom[a]][a]
}

// selectOpen pins the ticked payments that are in status from.
func selectOpen(ctx context.Context, db store.DB, ids []uuid.UUID, from payment.Status) (Selection, error) {
	var dues []time.Time
	if err := db.QueryRow(ctx, duesOfSQL, ids).Scan(&dues); err != nil {
		return Selection{}, fmt.Errorf("select %s payments: %w", from, err)
	}
	lo, hi := span(dues)
	rows, err := db.Query(ctx, openSelectionSQL, ids, string(from), dues, maxBulk+1, lo, hi)
	if err != nil {
		return Selection{}, fmt.Errorf("select %s payments: %w", from, err)
	}
	return collectSelection(rows)
}

// Amounts are a selection's payments in one currency.
type Amounts struct {
	Count int
	Total int64
	Max   int64
}

// Selection is what an action would act on.
type Selection struct {
	IDs []uuid.UUID
	// Attempts: each payment's attempt when selected.
	Attempts []int32
	// Amounts, per currency: never added across currencies.
	Amounts map[string]*Amounts
	Capped  bool
}

// totals is the total in each currency.
func (s Selection) totals() map[string]int64 {
	out := make(map[string]int64, len(s.Amounts))
	for cur, a := range s.Amounts {
		out[cur] = a.Total
	}
	return out
}

func selectDead(ctx context.Context, db store.DB, ids []uuid.UUID, reason string) (Selection, error) {
	var arg, dues any
	if ids != nil {
		arg = ids
		var ds []time.Time
		if err := db.QueryRow(ctx, duesOfSQL, ids).Scan(&ds); err != nil {
			return Selection{}, fmt.Errorf("select dead letters: %w", err)
		}
		dues = ds
	}
	rows, err := db.Query(ctx, deadSelectionSQL, arg, reason, maxBulk+1, dues)
	if err != nil {
		return Selection{}, fmt.Errorf("select dead letters: %w", err)
	}
	return collectSelection(rows)
}

// collectSelection reads (id, amount, currency, attempt) rows, at most
// maxBulk of them.
func collectSelection(rows pgx.Rows) (Selection, error) {
	defer rows.Close()
	s := Selection{Amounts: map[string]*Amounts{}}
	for rows.Next() {
		var id uuid.UUID
		var amt int64
		var cur string
		var attempt int32
		if err := rows.Scan(&id, &amt, &cur, &attempt); err != nil {
			return Selection{}, fmt.Errorf("select payments: %w", err)
		}
		if len(s.IDs) == maxBulk {
			s.Capped = true
			break
		}
		s.IDs = append(s.IDs, id)
		s.Attempts = append(s.Attempts, attempt)
		a := s.Amounts[cur]
		if a == nil {
			a = &Amounts{}
			s.Amounts[cur] = a
		}
		a.Count++
		a.Total += amt
		a.Max = max(a.Max, amt)
	}
	return s, rows.Err()
}

const insertRequestSQL = `
INSERT INTO console_requests (action, ids, filter, amount_total, amount_max, reason, requested_by, requested_name, needs_approval, state,
                              attempts, amounts, run_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
RETURNING id`

// threshold is the approval amount of currency cur, in its minor units:
// its own (ApprovalAmounts), else ApprovalAmount. Amounts are compared
// with it only within their currency.
func (c *Console) threshold(cur string) int64 {
	if t, ok := c.cfg.ApprovalAmounts[cur]; ok {
		return t
	}
	return c.cfg.ApprovalAmount
}

// running is what an operator's actions that ran without approval add up
// to over the window: how many, and the total in each currency.
type running struct {
	Count  int
	Totals map[string]int64
}

// needsApproval: four eyes on any action on more than one payment; on one
// of at least its currency's approval amount; and on one that takes the
// operator's running totals over the window past the threshold (the count,
// or the total in its currency): splitting a bulk action into single ones
// does not get past a second operator.
func (c *Console) needsApproval(s Selection, r running) bool {
	if len(s.IDs) > 1 || r.Count+1 > c.cfg.ApprovalCount {
		return true
	}
	for cur, a := range s.Amounts {
		if a.Max >= c.threshold(cur) || r.Totals[cur]+a.Total >= c.threshold(cur) {
			return true
		}
	}
	return false
}

// runningOf reads who's running totals (see runningSQL).
func runningOf(ctx context.Context, db store.DB, who string, window time.Duration) (running, error) {
	r := running{Totals: map[string]int64{}}
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

// createRequest records who's action on s. Whether it needs a second
// operator is decided with who's running totals read in the same
// transaction, under a lock of its own per operator: two of their actions
// sent at once are counted one after the other, never both against the
// total before either.
func (c *Console) createRequest(ctx context.Context, action, filter, reason string, runAt *time.Time, who identity, s Selection) (int64, bool, error) {
	var id int64
	var need bool
	err := pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 7202611303))`, who.Operator); err != nil {
			return err
		}
		r, err := runningOf(ctx, tx, who.Operator, c.cfg.ApprovalWindow)
		if err != nil {
			return err
		}
		need = c.needsApproval(s, r)
		// QUEUED: runs without a second operator (one payment, within
		// the thresholds); APPROVED is only ever a second operator's word.
		state := "QUEUED"
		if need {
			state = "AWAITING_APPROVAL"
		}
		var total, largest int64
		for _, a := range s.Amounts {
			total += a.Total
			largest = max(largest, a.Max)
		}
		return tx.QueryRow(ctx, insertRequestSQL, action, s.IDs, filter, total, largest, reason, who.Operator, who.Name, need, state,
			s.Attempts, s.totals(), runAt).Scan(&id)
	})
	if err != nil {
		return 0, false, fmt.Errorf("create request: %w", err)
	}
	c.log.Info("console: request", "id", id, "action", action, "payments", len(s.IDs), "operator", who.Name, "identity", who.Operator,
		"needs_approval", need)
	return id, need, nil
}

const requestCols = `id, action, ids, attempts, filter, amount_total, amount_max, amounts, reason, requested_by,
       coalesce(requested_name, requested_by), requested_at, needs_approval, coalesce(decided_by, ''),
       coalesce(decided_name, decided_by, ''), decided_at, state, done, failed, skipped, errors, finished_at, run_at`

func scanRequest(row pgx.Row) (*Request, error) {
	var r Request
	err := row.Scan(&r.ID, &r.Action, &r.IDs, &r.Attempts, &r.Filter, &r.AmountTotal, &r.AmountMax, &r.Amounts, &r.Reason,
		&r.RequestedBy, &r.RequestedName, &r.RequestedAt, &r.NeedsApproval, &r.DecidedBy, &r.DecidedName, &r.DecidedAt,
		&r.State, &r.Done, &r.Failed, &r.Skipped, &r.Errors, &r.FinishedAt, &r.RunAt)
	return &r, err
}

func (c *Console) request(ctx context.Context, id int64) (*Request, error) {
	r, err := scanRequest(c.db.QueryRow(ctx, `SELECT `+requestCols+` FROM console_requests WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	return r, err
}

var errNotFound = errors.New("not found")

// listRequests: the open ones, then the latest 50 closed.
func (c *Console) listRequests(ctx context.Context) ([]*Request, error) {
	rows, err := c.db.Query(ctx, `
(SELECT `+requestCols+` FROM console_requests WHERE state IN ('AWAITING_APPROVAL', 'APPROVED', 'QUEUED', 'RUNNING') ORDER BY id LIMIT 200)
UNION ALL
(SELECT `+requestCols+` FROM console_requests WHERE state IN ('DONE', 'REJECTED') ORDER BY id DESC LIMIT 50)`)
	if err != nil {
		return nil, fmt.Errorf("list requests: %w", err)
	}
	defer rows.Close()
	var out []*Request
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, fmt.Errorf("list requests: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// decideSQL approves or rejects a request awaiting approval, comparing
// identities (the provider's issuer and subject), never names: two
// people of one name are two operators, one person renamed is one. The
// database refuses the requester as decider too (a CHECK), so four eyes
// hold even against a bug here.
const decideSQL = `
UPDATE console_requests SET state = $2, decided_by = $3, decided_name = $4, decided_at = now()
WHERE id = $1 AND state = 'AWAITING_APPROVAL' AND requested_by <> $3
RETURNING id`

func (c *Console) decideRequest(ctx context.Context, id int64, approve bool, by identity) error {
	state := "REJECTED"
	if approve {
		state = "APPROVED"
	}
	var got int64
	err := c.db.QueryRow(ctx, decideSQL, id, state, by.Operator, by.Name).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return errors.New("it is not awaiting approval, or it is your own request: a second operator must decide")
	}
	if err != nil {
		return fmt.Errorf("decide request: %w", err)
	}
	c.log.Info("console: request decided", "id", id, "state", state, "operator", by.Name, "identity", by.Operator)
	return nil
}

// takeSQL gives this runner the oldest approved request, or one whose
// runner stopped reporting for 2 minutes, longer than one action may take
// (it died: its progress is kept, and the actions it did are fenced and
// probe-first, so doing one again is safe).
const takeSQL = `
UPDATE console_requests SET state = 'RUNNING', runner = $1, heartbeat_at = now()
WHERE id = (SELECT id FROM console_requests
            WHERE state IN ('APPROVED', 'QUEUED') OR (state = 'RUNNING' AND heartbeat_at < now() - interval '2 minutes')
            ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING ` + requestCols

const progressSQL = `
UPDATE console_requests SET done = $2, failed = $3, errors = $4, heartbeat_at = now(),
       state = CASE WHEN $5 THEN 'DONE' ELSE state END, finished_at = CASE WHEN $5 THEN now() END, skipped = $7
WHERE id = $1 AND runner = $6`

// runRequests runs approved requests in the background until ctx ends.
func (c *Console) runRequests(ctx context.Context) {
	for ctx.Err() == nil {
		r, err := scanRequest(c.db.QueryRow(ctx, takeSQL, c.cfg.Process))
		if err != nil {
			if !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
				c.log.Warn("console: take request", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		c.runRequest(ctx, r)
	}
}

// runRequest does each action of r from where it stopped, reporting
// progress as it goes.
func (c *Console) runRequest(ctx context.Context, r *Request) {
	note := r.Reason + " (console request #" + fmt.Sprint(r.ID) + ", requested by " + r.RequestedName
	if r.DecidedBy != "" {
		note += ", approved by " + r.DecidedName
	}
	note += ")"
	last := time.Now()
	for i := r.Done + r.Failed + r.Skipped; i < len(r.IDs); i++ {
		if ctx.Err() != nil {
			return // another runner (or this one, restarted) goes on
		}
		err := c.act(ctx, r, r.IDs[i], r.pin(i), note)
		switch {
		case err == nil:
			r.Done++
		case apierr.Reason(err) == apierr.ReasonChangedSinceRequest:
			r.Skipped++
			r.note(r.IDs[i].String() + ": skipped: " + actionError(err))
		default:
			r.Failed++
			r.note(r.IDs[i].String() + ": " + actionError(err))
		}
		if time.Since(last) > 500*time.Millisecond {
			if _, err := c.db.Exec(ctx, progressSQL, r.ID, r.Done, r.Failed, r.Errors, false, c.cfg.Process, r.Skipped); err != nil && ctx.Err() == nil {
				c.log.Warn("console: request progress", "id", r.ID, "err", err)
			}
			last = time.Now()
		}
	}
	if _, err := c.db.Exec(ctx, progressSQL, r.ID, r.Done, r.Failed, r.Errors, true, c.cfg.Process, r.Skipped); err != nil && ctx.Err() == nil {
		c.log.Warn("console: request done", "id", r.ID, "err", err)
	}
	c.log.Info("console: request done", "id", r.ID, "done", r.Done, "failed", r.Failed, "skipped", r.Skipped)
}

// pin is the attempt IDs[i] was pinned at; -1 for a request made before
// pins (the admin service then asks only that it is still a dead letter
// at the attempt it reads).
func (r *Request) pin(i int) int32 {
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

func (c *Console) act(ctx context.Context, r *Request, id uuid.UUID, attempt int32, note string) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	action, operator := r.Action, r.RequestedName
	switch action {
	case "REDRIVE":
		return c.actions.Redrive(actx, operator, id, attempt, note)
	case "RESOLVE":
		return c.actions.Resolve(actx, operator, id, attempt, note)
	case "CANCEL":
		return c.actions.Cancel(actx, operator, id, attempt, note)
	case "HOLD":
		return c.actions.Hold(actx, operator, id, attempt, note)
	case "RELEASE":
		return c.actions.Release(actx, operator, id, attempt, note)
	case "CANCEL_PENDING", "CANCEL_HELD":
		return c.actions.CancelOpen(actx, operator, id, actionFrom[action], attempt, note)
	case "RESCHEDULE":
		if r.RunAt == nil {
			return fmt.Errorf("reschedule without a run time")
		}
		return c.actions.Reschedule(actx, operator, id, attempt, *r.RunAt, note)
	case "RUN_NOW":
		return c.actions.RunNow(actx, operator, id, attempt, note)
	}
	return fmt.Errorf("unknown action %q", action)
}

// actionError is a refusal as an operator reads it: the admin service's
// message (which names the charge when the gateway holds one).
func actionError(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return strings.TrimSpace(err.Error())
}
