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
	"github.com/paysched/paysched/pkg/store"
)

// maxBulk is the most payments one request acts on.
const maxBulk = 10000

// Request is an operator's action on one or more dead letters.
type Request struct {
	ID     int64
	Action string
	IDs    []uuid.UUID
	// Attempts pins each of IDs: the attempt its dead letter was at when
	// requested (nil for requests made before version 16). A payment no
	// longer dead-lettered at it is skipped.
	Attempts      []int32
	Filter        string
	AmountTotal   int64
	AmountMax     int64
	Reason        string
	RequestedBy   string
	RequestedAt   time.Time
	NeedsApproval bool
	DecidedBy     string
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

var actions = map[string]string{"REDRIVE": "re-drive", "RESOLVE": "resolve as failed", "CANCEL": "cancel"}

// deadSelectionSQL pins what an action will act on: the dead letters among
// ids (the selected ones), or the first maxBulk matching a reason (all
// that match), through the dead-letter index; each with its attempt, which
// with the status says the payment has not changed since (only a claim
// changes the attempt, and a dead letter comes back only through one).
const deadSelectionSQL = `
SELECT p.id, p.amount_minor, p.attempt
FROM payments p
WHERE p.status = ` + dead + ` AND p.due_time <= now()
  AND ($1::uuid[] IS NULL OR p.id = ANY($1))
  AND ($2 = '' OR p.dead_letter_reason = $2)
ORDER BY p.due_time, p.id
LIMIT $3`

// Selection is what an action would act on.
type Selection struct {
	IDs []uuid.UUID
	// Attempts: each payment's attempt when selected.
	Attempts []int32
	Total    int64
	Max      int64
	Capped   bool
}

func selectDead(ctx context.Context, db store.DB, ids []uuid.UUID, reason string) (Selection, error) {
	var arg any
	if ids != nil {
		arg = ids
	}
	rows, err := db.Query(ctx, deadSelectionSQL, arg, reason, maxBulk+1)
	if err != nil {
		return Selection{}, fmt.Errorf("select dead letters: %w", err)
	}
	defer rows.Close()
	var s Selection
	for rows.Next() {
		var id uuid.UUID
		var amt int64
		var attempt int32
		if err := rows.Scan(&id, &amt, &attempt); err != nil {
			return Selection{}, fmt.Errorf("select dead letters: %w", err)
		}
		if len(s.IDs) == maxBulk {
			s.Capped = true
			break
		}
		s.IDs = append(s.IDs, id)
		s.Attempts = append(s.Attempts, attempt)
		s.Total += amt
		s.Max = max(s.Max, amt)
	}
	return s, rows.Err()
}

const insertRequestSQL = `
INSERT INTO console_requests (action, ids, filter, amount_total, amount_max, reason, requested_by, needs_approval, state, attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING id`

// needsApproval: four eyes on any action on more than one payment, or on
// one of at least the approval amount.
func (c *Console) needsApproval(s Selection) bool {
	return len(s.IDs) > 1 || s.Max >= c.cfg.ApprovalAmount
}

func (c *Console) createRequest(ctx context.Context, action, filter, reason, by string, s Selection) (int64, bool, error) {
	need := c.needsApproval(s)
	state := "APPROVED"
	if need {
		state = "AWAITING_APPROVAL"
	}
	var id int64
	err := c.db.QueryRow(ctx, insertRequestSQL, action, s.IDs, filter, s.Total, s.Max, reason, by, need, state, s.Attempts).Scan(&id)
	if err != nil {
		return 0, false, fmt.Errorf("create request: %w", err)
	}
	c.log.Info("console: request", "id", id, "action", action, "payments", len(s.IDs), "operator", by, "needs_approval", need)
	return id, need, nil
}

const requestCols = `id, action, ids, attempts, filter, amount_total, amount_max, reason, requested_by, requested_at, needs_approval,
       coalesce(decided_by, ''), decided_at, state, done, failed, skipped, errors, finished_at`

func scanRequest(row pgx.Row) (*Request, error) {
	var r Request
	err := row.Scan(&r.ID, &r.Action, &r.IDs, &r.Attempts, &r.Filter, &r.AmountTotal, &r.AmountMax, &r.Reason, &r.RequestedBy, &r.RequestedAt,
		&r.NeedsApproval, &r.DecidedBy, &r.DecidedAt, &r.State, &r.Done, &r.Failed, &r.Skipped, &r.Errors, &r.FinishedAt)
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
(SELECT `+requestCols+` FROM console_requests WHERE state IN ('AWAITING_APPROVAL', 'APPROVED', 'RUNNING') ORDER BY id LIMIT 200)
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

// decideSQL approves or rejects a request awaiting approval. The database
// refuses the requester as decider too (a CHECK), so four eyes hold even
// against a bug here.
const decideSQL = `
UPDATE console_requests SET state = $2, decided_by = $3, decided_at = now()
WHERE id = $1 AND state = 'AWAITING_APPROVAL' AND requested_by <> $3
RETURNING id`

func (c *Console) decideRequest(ctx context.Context, id int64, approve bool, by string) error {
	state := "REJECTED"
	if approve {
		state = "APPROVED"
	}
	var got int64
	err := c.db.QueryRow(ctx, decideSQL, id, state, by).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return errors.New("it is not awaiting approval, or it is your own request: a second operator must decide")
	}
	if err != nil {
		return fmt.Errorf("decide request: %w", err)
	}
	c.log.Info("console: request decided", "id", id, "state", state, "operator", by)
	return nil
}

// takeSQL gives this runner the oldest approved request, or one whose
// runner stopped reporting for 2 minutes, longer than one action may take
// (it died: its progress is kept, and the actions it did are fenced and
// probe-first, so doing one again is safe).
const takeSQL = `
UPDATE console_requests SET state = 'RUNNING', runner = $1, heartbeat_at = now()
WHERE id = (SELECT id FROM console_requests
            WHERE state = 'APPROVED' OR (state = 'RUNNING' AND heartbeat_at < now() - interval '2 minutes')
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
	note := r.Reason + " (console request #" + fmt.Sprint(r.ID) + ", requested by " + r.RequestedBy
	if r.DecidedBy != "" {
		note += ", approved by " + r.DecidedBy
	}
	note += ")"
	last := time.Now()
	for i := r.Done + r.Failed + r.Skipped; i < len(r.IDs); i++ {
		if ctx.Err() != nil {
			return // another runner (or this one, restarted) goes on
		}
		err := c.act(ctx, r.Action, r.RequestedBy, r.IDs[i], r.pin(i), note)
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

func (c *Console) act(ctx context.Context, action, operator string, id uuid.UUID, attempt int32, note string) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch action {
	case "REDRIVE":
		return c.actions.Redrive(actx, operator, id, attempt, note)
	case "RESOLVE":
		return c.actions.Resolve(actx, operator, id, attempt, note)
	case "CANCEL":
		return c.actions.Cancel(actx, operator, id, attempt, note)
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
