package store

// Moves made outside the execution path: the reconciler's repairs, the
// gateway's webhooks, the resolver and operators. Each is recorded in
// payment_actions with who, why and the previous status.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store/movedb"
)

// OutOfBandMove is one transition made outside the execution path.
type OutOfBandMove struct {
	ID uuid.UUID
	// By is who moves it: the statuses it may leave are those
	// payment.Moves lets By move to To; in any other status the move does
	// not happen (ErrNotMoved).
	By payment.Actor
	To payment.Status
	// From, when set, is the only status the move may leave (one of those
	// By may leave): an action approved on a dead letter acts on that dead
	// letter, not on what it became since.
	From payment.Status
	// Amount and Currency, when Amount > 0, must match the payment: gateway
	// truth about another amount never moves a row.
	Amount   int64
	Currency string
	// GatewayRef, when set, is recorded as the payment's charge.
	GatewayRef string
	// Redrive gives the payment a fresh retry budget, due now (same gateway
	// key: the key is always the paymentId).
	Redrive bool
	// LastError replaces the payment's last error when set.
	LastError string
	// FailReason, for a move to FAILED: why, as a stable code.
	FailReason payment.FailReason
	// Fenced: the move is made only while the payment is still at Attempt,
	// the attempt number the mover read before it asked the gateway, for a
	// claim since may have charged it (operators' moves). Attempt 0, a
	// payment never claimed, is a fence like any other.
	Fenced  bool
	Attempt int32
	// Who and why, for payment_actions.
	Actor, Action, Reason string
	RunID                 int64
	// Request is the operator's request the move applies (0: none). The
	// database refuses the admin role's moves without one (0026).
	Request int64
}

// ErrNotMoved means the payment does not exist or is not in a status the move
// may leave (someone else moved it first).
var ErrNotMoved = errors.New("payment not in a status this move may leave")

// Apply makes m and returns the status the payment left.
func Apply(ctx context.Context, db pgdb.DB, m OutOfBandMove) (payment.Status, error) {
	var from []string
	for _, s := range payment.From(m.To, m.By) {
		if m.From == "" || m.From == s {
			from = append(from, string(s))
		}
	}
	if len(from) == 0 {
		return "", fmt.Errorf("move payment %s: %w: %s may not move a payment from %q to %s", m.ID, ErrNotAllowed, m.By, m.From, m.To)
	}
	if m.By == payment.Webhook && m.Amount <= 0 {
		// Gateway truth about money names its amount: a webhook that does
		// not is never applied (the amount check would be skipped).
		return "", fmt.Errorf("move payment %s: a webhook move needs the charge's amount", m.ID)
	}
	// The partition key first (it never changes): with it as a parameter
	// the move plans and locks one partition, not every day of the year.
	due, err := movedb.New(db).DueTimeOf(ctx, m.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotMoved
	}
	if err != nil {
		return "", fmt.Errorf("find payment %s: %w", m.ID, err)
	}
	fence := int32(-1) // unfenced
	if m.Fenced {
		fence = m.Attempt
	}
	var prev payment.Status
	// Why it is safe: movedb/moves.sql, Move.
	err = underRequest(ctx, db, m.Request, func(db pgdb.DB) error {
		st, err := movedb.New(db).Move(ctx, movedb.MoveParams{ID: m.ID, FromStatuses: from, ToStatus: string(m.To), Amount: m.Amount,
			Currency: m.Currency, GatewayRef: m.GatewayRef, Redrive: m.Redrive, LastError: m.LastError, Actor: m.Actor,
			Action: m.Action, Reason: m.Reason, RunID: m.RunID, DueTime: due, Fence: fence, FailReason: string(m.FailReason),
			ClaimedOnce: m.By == payment.Webhook})
		prev = payment.Status(st)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotMoved
	}
	if err != nil {
		return "", fmt.Errorf("move payment %s to %s: %w", m.ID, m.To, err)
	}
	return prev, nil
}

// Target is what a gateway's event about a payment is checked against
// before it may move it.
type Target struct {
	Payer   string
	Attempt int32
}

// TargetOf reads payment id's payer and attempt (ErrNotFound when there is
// no such payment). The payer never changes and the attempt only grows, so
// what it reads still holds for a move made after it.
func TargetOf(ctx context.Context, db pgdb.DB, id uuid.UUID) (Target, error) {
	var t Target
	// The partition key first, as Apply reads it: one partition planned
	// and locked.
	q := movedb.New(db)
	due, err := q.DueTimeOf(ctx, id)
	if err == nil {
		var row movedb.TargetOfRow
		row, err = q.TargetOf(ctx, movedb.TargetOfParams{ID: id, DueTime: due})
		t = Target{Payer: row.Payer, Attempt: row.Attempt}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Target{}, ErrNotFound
	}
	if err != nil {
		return Target{}, fmt.Errorf("read payment %s: %w", id, err)
	}
	return t, nil
}

// Reschedule is an operator's change of when a PENDING or HELD payment
// runs: its run_at, never its due_time (the partition key, and the
// instant its client scheduled).
type Reschedule struct {
	ID uuid.UUID
	// From are the statuses it may be in (PENDING, HELD).
	From []payment.Status
	// Attempt is the attempt the operator read: a claim since (and perhaps
	// a charge) makes the reschedule miss.
	Attempt int32
	// RunAt is the new run time; zero: now. It is never earlier than the
	// due time (the statement takes the later of the two).
	RunAt time.Time
	// Who and why, for payment_actions.
	Actor, Action, Reason string
	// Request is the operator's request it applies (see Move.Request).
	Request int64
}

// ApplyReschedule makes r and returns the status the payment is in;
// ErrNotMoved when it is missing, in another status or at another
// attempt.
func ApplyReschedule(ctx context.Context, db pgdb.DB, r Reschedule) (payment.Status, error) {
	from := make([]string, len(r.From))
	for i, s := range r.From {
		from[i] = string(s)
	}
	due, err := movedb.New(db).DueTimeOf(ctx, r.ID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotMoved
	}
	if err != nil {
		return "", fmt.Errorf("find payment %s: %w", r.ID, err)
	}
	var at *time.Time
	if !r.RunAt.IsZero() {
		at = &r.RunAt
	}
	var st payment.Status
	// Why it is safe: movedb/moves.sql, Reschedule.
	err = underRequest(ctx, db, r.Request, func(db pgdb.DB) error {
		prev, err := movedb.New(db).Reschedule(ctx, movedb.RescheduleParams{ID: r.ID, DueTime: due, FromStatuses: from,
			Attempt: r.Attempt, RunAt: at, Actor: r.Actor, Action: r.Action, Reason: r.Reason})
		st = payment.Status(prev)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotMoved
	}
	if err != nil {
		return "", fmt.Errorf("reschedule payment %s: %w", r.ID, err)
	}
	return st, nil
}

// underRequest runs f, naming request to the database first when it is
// set: in a transaction of its own, whose setting (paysched.request, local
// to it) the admin role's guard reads (0026).
func underRequest(ctx context.Context, db pgdb.DB, request int64, f func(pgdb.DB) error) error {
	if request == 0 {
		return f(db)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("apply request %d: %w", request, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if err := movedb.New(tx).NameRequest(ctx, strconv.FormatInt(request, 10)); err != nil {
		return fmt.Errorf("apply request %d: %w", request, err)
	}
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
