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
	"github.com/paysched/paysched/pkg/api/approval/approvaldb"
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

// take gives this runner the oldest approved (or queued) request not
// expired, or one whose runner stopped reporting for 2 minutes (it died:
// its progress is kept, and the actions it did are fenced and
// probe-first, so doing one again is safe); id, when not 0, that request
// only. pgx.ErrNoRows: none.
func (q *Requests) take(ctx context.Context, process string, id int64) (*Request, error) {
	row, err := approvaldb.New(q.db).TakeRequest(ctx, approvaldb.TakeRequestParams{Runner: process, Just: id})
	if err != nil {
		return nil, err
	}
	return fromRow(row)
}

// progress records how far r got (finished: it is DONE).
func (q *Requests) progress(ctx context.Context, r *Request, process string, finished bool) error {
	return approvaldb.New(q.db).RecordProgress(ctx, approvaldb.RecordProgressParams{ID: r.ID, Done: int32(r.Done), Failed: int32(r.Failed),
		Errors: r.Errors, Finished: finished, Runner: process, Skipped: int32(r.Skipped)})
}

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
		r, err := q.take(ctx, process, 0)
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
	r, err := q.take(ctx, process, id)
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
			if err := q.progress(ctx, r, process, false); err != nil && ctx.Err() == nil {
				q.log.Warn("approval: request progress", "id", r.ID, "err", err)
			}
			last = time.Now()
		}
	}
	if err := q.progress(ctx, r, process, true); err != nil && ctx.Err() == nil {
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
