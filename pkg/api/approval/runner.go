package approval

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
)

// Actor applies one payment of a request: the admin service's probe-first,
// fenced moves, each only while the payment is still as pinned (status and
// attempt); otherwise it answers CHANGED_SINCE_REQUEST. ctx carries the
// request (RequestOf), which the move names to the database.
type Actor interface {
	Redrive(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error
	Resolve(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error
	Cancel(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error
	Hold(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error
	Release(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error
	CancelOpen(ctx context.Context, operator string, id uuid.UUID, from payment.Status, attempt int32, note string) error
	Reschedule(ctx context.Context, operator string, id uuid.UUID, attempt int32, runAt time.Time, note string) error
	RunNow(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error
}

type requestKey struct{}

// WithRequest is ctx applying request id: the moves made under it name it
// to the database, which checks it (0026).
func WithRequest(ctx context.Context, id int64) context.Context {
	return context.WithValue(ctx, requestKey{}, id)
}

// RequestOf is the request ctx applies, or 0.
func RequestOf(ctx context.Context) int64 {
	id, _ := ctx.Value(requestKey{}).(int64)
	return id
}

// takeSQL gives this runner the oldest approved (or queued) request not
// expired, or one whose runner stopped reporting for 2 minutes, longer
// than one action may take (it died: its progress is kept, and the
// actions it did are fenced and probe-first, so doing one again is safe).
// $2, when not 0, takes that request only.
const takeSQL = `
UPDATE console_requests SET state = 'RUNNING', runner = $1, heartbeat_at = now()
WHERE id = (SELECT id FROM console_requests
            WHERE ($2::bigint = 0 OR id = $2)
              AND ((state IN ('APPROVED', 'QUEUED') AND (expires_at IS NULL OR expires_at > now()))
                   OR (state = 'RUNNING' AND heartbeat_at < now() - interval '2 minutes'))
            ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING ` + requestCols

const progressSQL = `
UPDATE console_requests SET done = $2, failed = $3, errors = $4, heartbeat_at = now(),
       state = CASE WHEN $5 THEN 'DONE' ELSE state END, finished_at = CASE WHEN $5 THEN now() END, skipped = $7
WHERE id = $1 AND runner = $6`

// Run applies approved and queued requests, and expires those whose time
// ran out, until ctx ends. process names this runner.
func (q *Requests) Run(ctx context.Context, process string, actor Actor) {
	lastExpire := time.Time{}
	for ctx.Err() == nil {
		if time.Since(lastExpire) > 10*time.Second {
			if _, err := q.Expire(ctx); err != nil && ctx.Err() == nil {
				q.log.Warn("approval: expire", "err", err)
			}
			lastExpire = time.Now()
		}
		r, err := scanRequest(q.db.QueryRow(ctx, takeSQL, process, int64(0)))
		if err != nil {
			if !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
				q.log.Warn("approval: take request", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		// Each action's error is recorded in the request itself (its
		// failed count and notes), where the operators read it.
		_ = q.run(ctx, process, actor, r)
	}
}

// RunOne applies request id now, here, if it is approved or queued (and
// not expired), and answers it as it ends with the last action's error
// (nil when it was applied). A request another runner took, or one not
// runnable, is answered as it is, with no error.
func (q *Requests) RunOne(ctx context.Context, id int64, process string, actor Actor) (*Request, error) {
	r, err := scanRequest(q.db.QueryRow(ctx, takeSQL, process, id))
	if errors.Is(err, pgx.ErrNoRows) {
		got, gerr := q.Get(ctx, id)
		return got, gerr
	}
	if err != nil {
		return nil, fmt.Errorf("take request %d: %w", id, err)
	}
	last := q.run(ctx, process, actor, r)
	return r, last
}

// run does each action of r from where it stopped, reporting progress as
// it goes; it answers the last action's error.
func (q *Requests) run(ctx context.Context, process string, actor Actor, r *Request) error {
	note := r.Reason + " (request #" + fmt.Sprint(r.ID) + " via " + r.Via + ", requested by " + r.RequestedName
	if r.DecidedBy != "" {
		note += ", approved by " + r.DecidedName
	}
	note += ")"
	var lastErr error
	last := time.Now()
	actx := WithRequest(ctx, r.ID)
	for i := r.Done + r.Failed + r.Skipped; i < len(r.IDs); i++ {
		if ctx.Err() != nil {
			return ctx.Err() // another runner (or this one, restarted) goes on
		}
		err := act(actx, actor, r, r.IDs[i], r.Pin(i), note)
		lastErr = err
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
			if _, err := q.db.Exec(ctx, progressSQL, r.ID, r.Done, r.Failed, r.Errors, false, process, r.Skipped); err != nil && ctx.Err() == nil {
				q.log.Warn("approval: request progress", "id", r.ID, "err", err)
			}
			last = time.Now()
		}
	}
	if _, err := q.db.Exec(ctx, progressSQL, r.ID, r.Done, r.Failed, r.Errors, true, process, r.Skipped); err != nil && ctx.Err() == nil {
		q.log.Warn("approval: request done", "id", r.ID, "err", err)
	}
	r.State = "DONE"
	q.log.Info("approval: request done", "id", r.ID, "done", r.Done, "failed", r.Failed, "skipped", r.Skipped)
	return lastErr
}

func act(ctx context.Context, actor Actor, r *Request, id uuid.UUID, attempt int32, note string) error {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Audited as "admin:<requester>", "admin:console:<requester>" for the
	// console's (as its moves always were).
	action, operator := r.Action, r.RequestedName
	if r.Via == "console" {
		operator = "console:" + operator
	}
	switch action {
	case "REDRIVE":
		return actor.Redrive(actx, operator, id, attempt, note)
	case "RESOLVE":
		return actor.Resolve(actx, operator, id, attempt, note)
	case "CANCEL":
		return actor.Cancel(actx, operator, id, attempt, note)
	case "HOLD":
		return actor.Hold(actx, operator, id, attempt, note)
	case "RELEASE":
		return actor.Release(actx, operator, id, attempt, note)
	case "CANCEL_PENDING", "CANCEL_HELD":
		return actor.CancelOpen(actx, operator, id, Actions[action], attempt, note)
	case "RESCHEDULE":
		if r.RunAt == nil {
			return errors.New("reschedule without a run time")
		}
		return actor.Reschedule(actx, operator, id, attempt, *r.RunAt, note)
	case "RUN_NOW":
		return actor.RunNow(actx, operator, id, attempt, note)
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
