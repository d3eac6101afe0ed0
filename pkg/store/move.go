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

// moveSQL is every non-executor transition.
//
// Why it is safe: the row is locked and its (status, attempt) read in the
// same statement that updates it, and the UPDATE is fenced on both. A claim
// racing for a PENDING row either holds the lock first (this statement then
// re-reads PROCESSING and matches nothing) or finds it locked and skips it
// (SKIP LOCKED), then sees it no longer PENDING. An executor's late outcome
// is fenced by status = 'PROCESSING' and finds the new status. The action
// row is written by the same statement, so a move is never unaudited. A
// move back to PENDING (re-drive, a resolver's "not charged") sets
// probe_first: a dead letter may have reached the gateway, so the next
// attempt asks it before charging, whatever the mover saw earlier; a
// release from HELD keeps it as it was (a hold is entered from PENDING,
// with nothing in flight, so it adds no doubt). No move
// here clears it (a move to rest keeps it): only the executor's move out of
// PROCESSING may, and the database's guard refuses any other (0016). An
// operator's move also names the attempt it read before asking the
// gateway, so a claim (and perhaps a charge) in between makes it miss. A
// webhook's move needs a payment claimed at least once ($16): the engine
// never sent one at attempt 0 to the gateway, so a charge for it is not
// ours to record.
const moveSQL = `
WITH cur AS (
    SELECT p.id, p.due_time, p.status, p.attempt FROM payments p
    WHERE p.id = $1 AND p.due_time = $13
      AND p.status = ANY($2::text[])
      AND ($4::bigint = 0 OR (p.amount_minor = $4 AND p.currency = $5))
      AND ($14::int < 0 OR p.attempt = $14)
      AND (NOT $16::bool OR p.attempt > 0)
    FOR UPDATE OF p
), moved AS (
    UPDATE payments p
    SET status = $3,
        gateway_ref = COALESCE(NULLIF($6, ''), p.gateway_ref),
        retries = CASE WHEN $7 THEN 0 ELSE p.retries END,
        probes = CASE WHEN $7 THEN 0 ELSE p.probes END,
        run_at = CASE WHEN $7 THEN GREATEST(p.due_time, now()) ELSE p.run_at END,
        probe_first = p.probe_first OR ($3 = 'PENDING' AND cur.status <> 'HELD'),
        dead_letter_reason = CASE WHEN $3 = 'DEAD_LETTERED' THEN p.dead_letter_reason END,
        failure_reason = CASE WHEN $3 = 'FAILED' THEN NULLIF($15, '') END,
        releases = CASE WHEN $7 THEN 0 ELSE p.releases END,
        last_error = COALESCE(NULLIF($8, ''), p.last_error),
        lease_until = NULL, lease_owner = NULL, updated_at = now()
    FROM cur
    -- due_time = $13 as well: the planner prunes the UPDATE's target to
    -- the payment's partition only on a value it knows (cur's is not one),
    -- and an UPDATE planned over every daily partition took ~100 ms of a
    -- core to plan at each webhook's move.
    WHERE p.id = cur.id AND p.due_time = $13 AND p.due_time = cur.due_time AND p.status = cur.status AND p.attempt = cur.attempt
    RETURNING cur.status AS prev
)
INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason, run_id)
SELECT $1, $9, $10, prev, $3, $11, NULLIF($12, 0) FROM moved
RETURNING prev_status`

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
	var due time.Time
	err := db.QueryRow(ctx, `SELECT due_time FROM payment_index WHERE id = $1`, m.ID).Scan(&due)
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
	err = underRequest(ctx, db, m.Request, func(db pgdb.DB) error {
		return db.QueryRow(ctx, moveSQL, m.ID, from, m.To, m.Amount, m.Currency, m.GatewayRef, m.Redrive,
			m.LastError, m.Actor, m.Action, m.Reason, m.RunID, due, fence, string(m.FailReason), m.By == payment.Webhook).Scan(&prev)
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
	var due time.Time
	err := db.QueryRow(ctx, `SELECT due_time FROM payment_index WHERE id = $1`, id).Scan(&due)
	if err == nil {
		err = db.QueryRow(ctx, `SELECT payer, attempt FROM payments WHERE id = $1 AND due_time = $2`, id, due).Scan(&t.Payer, &t.Attempt)
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

// rescheduleSQL moves a payment's run_at.
//
// Why it is safe: it is moveSQL's fence without a status change. The row
// is locked and its (status, attempt) read in the statement that updates
// it, and the UPDATE repeats both: a claim that holds the lock first
// leaves it PROCESSING at the next attempt, and this matches nothing; a
// claim that finds it locked skips it (SKIP LOCKED) and reads the new
// run_at after. The run time never goes before the due time (the CHECK
// run_at >= due_time would refuse it), so the row stays in its partition
// and every sweep bound that prunes by due_time still holds. A run_at made
// earlier appends a tenant wakeup (0018's trigger), so fair claims reach
// it. The action row is written by the same statement.
const rescheduleSQL = `
WITH cur AS (
    SELECT p.id, p.due_time, p.status, p.attempt FROM payments p
    WHERE p.id = $1 AND p.due_time = $2 AND p.status = ANY($3::text[]) AND p.attempt = $4
    FOR UPDATE OF p
), moved AS (
    UPDATE payments p
    SET run_at = GREATEST(p.due_time, COALESCE($5, now())), updated_at = now()
    FROM cur
    WHERE p.id = cur.id AND p.due_time = $2 AND p.due_time = cur.due_time AND p.status = cur.status AND p.attempt = cur.attempt
    RETURNING cur.status AS prev, p.run_at
)
INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason)
SELECT $1, $6, $7, prev, prev, $8 || ' (runs at ' || to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ')' FROM moved
RETURNING prev_status`

// ApplyReschedule makes r and returns the status the payment is in;
// ErrNotMoved when it is missing, in another status or at another
// attempt.
func ApplyReschedule(ctx context.Context, db pgdb.DB, r Reschedule) (payment.Status, error) {
	from := make([]string, len(r.From))
	for i, s := range r.From {
		from[i] = string(s)
	}
	var due time.Time
	err := db.QueryRow(ctx, `SELECT due_time FROM payment_index WHERE id = $1`, r.ID).Scan(&due)
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
	err = underRequest(ctx, db, r.Request, func(db pgdb.DB) error {
		return db.QueryRow(ctx, rescheduleSQL, r.ID, due, from, r.Attempt, at, r.Actor, r.Action, r.Reason).Scan(&st)
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
	if _, err := tx.Exec(ctx, `SELECT set_config('paysched.request', $1, true)`, strconv.FormatInt(request, 10)); err != nil {
		return fmt.Errorf("apply request %d: %w", request, err)
	}
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
