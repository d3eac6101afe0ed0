package store

// What an executor learned: the attempt rows, and the payment transitions
// fenced by the attempt number. Both are batched: one statement per step
// for a whole claimed batch.

import (
	"github.com/paysched/paysched/pkg/payment"

	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Item is one claimed payment as the executor received it.
type Item struct {
	ID      uuid.UUID
	DueTime time.Time
	Attempt int32
	Retries int32
}

// startSQL records the start of each attempt, only for claims that are
// still current (PROCESSING at that attempt): a stale batch sent to a slow
// executor is never charged by it. The attempt row's existence is also what
// tells a sweeper that a claim was started and must not be released.
const startSQL = `
INSERT INTO payment_attempts (payment_id, attempt, started_at, gateway_key, executor_id)
SELECT u.id, u.attempt, now(), u.id::text, $4
FROM unnest($1::uuid[], $2::timestamptz[], $3::int[]) AS u(id, due_time, attempt)
JOIN payments p ON p.id = u.id AND p.due_time = u.due_time
WHERE p.status = 'PROCESSING' AND p.attempt = u.attempt
ON CONFLICT (payment_id, attempt) DO NOTHING
RETURNING payment_id`

// Start writes attempt rows and returns the items that may be charged.
func Start(ctx context.Context, db *pgxpool.Pool, executor string, items []Item) ([]Item, error) {
	ids, dues, attempts := columns(items)
	rows, err := db.Query(ctx, startSQL, ids, dues, attempts, executor)
	if err != nil {
		return nil, fmt.Errorf("start attempts: %w", err)
	}
	started, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("start attempts: %w", err)
	}
	ok := make(map[uuid.UUID]bool, len(started))
	for _, id := range started {
		ok[id] = true
	}
	out := make([]Item, 0, len(started))
	for _, it := range items {
		if ok[it.ID] {
			out = append(out, it)
		}
	}
	return out, nil
}

func columns(items []Item) ([][16]byte, []time.Time, []int32) {
	ids := make([][16]byte, len(items))
	dues := make([]time.Time, len(items))
	attempts := make([]int32, len(items))
	for i, it := range items {
		ids[i], dues[i], attempts[i] = it.ID, it.DueTime, it.Attempt
	}
	return ids, dues, attempts
}

// Transition is the decided fate of one attempt.
type Transition struct {
	Item
	// Outcome for the attempt row (empty: the attempt never started).
	Outcome payment.AttemptOutcome
	Ref     string
	Error   string
	// Status is the payment's next status: COMPLETED, FAILED, PENDING or DEAD_LETTERED.
	Status payment.Status
	// RunAt is the next run time when PENDING.
	RunAt time.Time
	// NewRetries is the retry budget spent after this attempt.
	NewRetries int32
	// DeadReason says why, when dead-lettered.
	DeadReason payment.DeadReason
}

// finishSQL closes attempt rows. It is not fenced: a zombie's attempt row is
// its own, and recording what it saw is the audit trail — even over the
// ABANDONED the reaper wrote while it was slow.
const finishSQL = `
UPDATE payment_attempts a
SET finished_at = now(), outcome = u.outcome, gateway_ref = NULLIF(u.ref, ''), error = NULLIF(u.err, '')
FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::text[]) AS u(id, attempt, outcome, ref, err)
WHERE a.payment_id = u.id AND a.attempt = u.attempt AND (a.finished_at IS NULL OR a.outcome = 'ABANDONED')`

// transitionSQL moves each payment out of PROCESSING.
//
// Why it is safe: the WHERE clause is the fence. It matches only a row that
// is still PROCESSING at the attempt this executor was given; if the lease
// expired and the reaper or another sweeper moved on, attempt has changed
// (or the status has) and the late write changes nothing. One statement per
// batch, never read-then-write.
const transitionSQL = `
UPDATE payments p
SET status = u.status,
    run_at = GREATEST(p.due_time, COALESCE(u.run_at, p.run_at)),
    retries = u.retries,
    gateway_ref = COALESCE(NULLIF(u.ref, ''), p.gateway_ref),
    last_error = NULLIF(u.err, ''),
    dead_letter_reason = NULLIF(u.dead, ''),
    lease_until = NULL, lease_owner = NULL, updated_at = now()
FROM unnest($1::uuid[], $2::timestamptz[], $3::int[], $4::text[], $5::timestamptz[], $6::int[],
            $7::text[], $8::text[], $9::text[])
     AS u(id, due_time, attempt, status, run_at, retries, ref, err, dead)
WHERE p.id = u.id AND p.due_time = u.due_time AND p.status = 'PROCESSING' AND p.attempt = u.attempt`

// Record writes a batch of transitions in one transaction and returns how
// many were applied (the rest were fenced out).
func Record(ctx context.Context, db *pgxpool.Pool, ts []Transition) (int, error) {
	for _, t := range ts {
		// The executor moves only what the state machine lets it move.
		if !payment.Allowed(payment.Processing, t.Status, payment.Executor) {
			return 0, fmt.Errorf("record %s: the executor may not move a payment to %q", t.ID, t.Status)
		}
	}
	n := len(ts)
	ids := make([][16]byte, n)
	dues := make([]time.Time, n)
	attempts := make([]int32, n)
	outcomes, refs, errs, statuses, deads := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	runAts := make([]*time.Time, n)
	retries := make([]int32, n)
	for i, t := range ts {
		ids[i], dues[i], attempts[i] = t.ID, t.DueTime, t.Attempt
		outcomes[i], refs[i], errs[i], statuses[i], deads[i] = string(t.Outcome), t.Ref, t.Error, string(t.Status), string(t.DeadReason)
		if !t.RunAt.IsZero() {
			r := t.RunAt
			runAts[i] = &r
		}
		retries[i] = t.NewRetries
	}
	// Both statements in one round trip and one transaction.
	b := &pgx.Batch{}
	b.Queue(finishSQL, ids, attempts, outcomes, refs, errs)
	b.Queue(transitionSQL, ids, dues, attempts, statuses, runAts, retries, refs, errs, deads)
	applied := 0
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		br := tx.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return err
		}
		applied = int(tag.RowsAffected())
		return br.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("record outcomes: %w", err)
	}
	return applied, nil
}
