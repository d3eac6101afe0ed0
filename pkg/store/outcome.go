package store

// The executor's two statements: LoadClaimed reads what a claimed batch must
// charge from the rows themselves, and Complete writes what the attempts
// learned: each attempt row once, with its outcome, and the payment's
// transition fenced by the attempt number, in one statement for many
// payments (the executor's completer batches across Execute calls).

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// ClaimRef is one claimed payment as the executor received it: the row's key
// and the fencing token.
type ClaimRef struct {
	ID      uuid.UUID
	DueTime time.Time
	Attempt int32
}

// ClaimedPayment is a claimed payment as its row holds it, at the claim's attempt.
type ClaimedPayment struct {
	ClaimRef
	Retries    int32
	ProbeFirst bool
	// Releases counts the claims of this payment released untouched in a
	// row before this one.
	Releases int32
	Payer    string
	Payee    string
	Amount   int64
	Currency string
	// LeaseLeft is how long the claim's lease still ran when it was read
	// (by the database's clock).
	LeaseLeft time.Duration
	// SentBy is when the requests of the payment's earlier attempts had
	// all been sent (requests_sent_by), in this process's clock; zero if
	// it was never claimed before.
	SentBy time.Time
}

// loadSQL reads the rows of a batch that are still PROCESSING at the
// claimed attempt, in one partition (%s). A row another process moved, or
// an item the sweeper never claimed at that attempt, is not returned: the
// executor does not touch it. The charge's parameters come from here, never
// from the request.
//
// PROCESSING implies a lease (the claim sets it); a lease already past is
// read as none left, and the executor does not start it.
const loadSQL = `
SELECT p.id, p.due_time, p.attempt, p.retries, p.probe_first, p.releases, p.payer, p.payee, p.amount_minor, p.currency,
       COALESCE(EXTRACT(epoch FROM p.lease_until - clock_timestamp())::float8, 0), ` + sentAgoCol + `
FROM unnest($1::uuid[], $2::timestamptz[], $3::int[]) AS u(id, due_time, attempt)
JOIN %s p ON p.id = u.id AND p.due_time = u.due_time
WHERE p.status = 'PROCESSING' AND p.attempt = u.attempt`

// sentAgoCol reads how long ago a payment's requests had all been sent
// (requests_sent_by) by the database's clock, which sentBy turns into
// this process's: the two clocks may differ by more than a gateway's
// longest request, an age does not.
const sentAgoCol = `EXTRACT(epoch FROM clock_timestamp() - p.requests_sent_by)::float8`

// sentBy is the instant, in this process's clock, ago seconds before now;
// zero for none.
func sentBy(ago *float64) time.Time {
	if ago == nil {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(*ago * float64(time.Second)))
}

// LoadClaimed reads the claimed rows of items that are still current.
func LoadClaimed(ctx context.Context, db pgdb.DB, items []ClaimRef) ([]ClaimedPayment, error) {
	out := make([]ClaimedPayment, 0, len(items))
	for _, g := range groupByPartition(len(items), func(i int) time.Time { return items[i].DueTime }) {
		ids := make([][16]byte, len(g))
		dues := make([]time.Time, len(g))
		attempts := make([]int32, len(g))
		for j, i := range g {
			ids[j], dues[j], attempts[j] = items[i].ID, items[i].DueTime, items[i].Attempt
		}
		rows, err := db.Query(ctx, partitionSQL(loadSQL, dues[0]), ids, dues, attempts)
		if missingPartition(err) {
			// No such day (a forged or long-dropped due time): nothing is
			// claimed there.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("load batch: %w", err)
		}
		var w ClaimedPayment
		var left float64
		var ago *float64
		_, err = pgx.ForEachRow(rows, []any{&w.ID, &w.DueTime, &w.Attempt, &w.Retries, &w.ProbeFirst, &w.Releases, &w.Payer, &w.Payee, &w.Amount, &w.Currency, &left, &ago},
			func() error {
				w.LeaseLeft = time.Duration(left * float64(time.Second))
				w.SentBy = sentBy(ago)
				out = append(out, w)
				return nil
			})
		if err != nil && !missingPartition(err) {
			return nil, fmt.Errorf("load batch: %w", err)
		}
	}
	return out, nil
}

// Transition is the executor's decision for one claimed payment.
type Transition struct {
	ClaimRef
	// Outcome is what the attempt learned; empty for a release (no call
	// was made, so no attempt row is written).
	Outcome   payment.AttemptOutcome
	StartedAt time.Time
	Ref       string
	Error     string
	// Status is the payment's next status.
	Status payment.Status
	// RunAt, when set, is the next attempt's time (a retry's backoff).
	RunAt      time.Time
	NewRetries int32
	DeadReason payment.DeadReason
	// FailReason, when Status is FAILED: why, as a stable code.
	FailReason payment.FailReason
	// ProbeFirst: the next attempt must ask the gateway before charging.
	ProbeFirst bool
	// Releases is the new count of claims released untouched in a row:
	// one more for a release, 0 once an attempt is recorded.
	Releases int32
}

// completeSQL applies a batch of transitions, all in one partition (%s),
// and writes their attempt rows.
//
// Why it is safe: each payment is updated only while it is PROCESSING at
// the attempt the executor was given (the fencing token); if the reaper
// took the lease back or another process moved it, the update matches
// nothing and the payment keeps its newer state (probe_first is set by
// whoever took it back, so the next attempt asks the gateway). The attempt
// row is written whether or not the transition applied: it is the record
// of what the gateway said to this attempt. A row the reaper wrote as
// ABANDONED is replaced by the real outcome; any other existing row wins
// (a retried statement changes nothing). Both writes are one statement:
// there is no moment where one exists without the other.
//
// The payment's change announces its attempt (schema 15): the attempt_*
// columns carry what the attempt row holds, and the attempt row of a
// payment moved here is marked announced, which the publication leaves
// out (cdc derives its change event from the payment's). An attempt row
// whose payment was fenced out is not announced and is published itself,
// as is the replacement of an ABANDONED row.
//
// attempt_executor is set on every move, an attempt's or not: a move
// that names its executor and starts no attempt sent nothing, and the
// guard keeps the payment's requests_sent_by (schema 17).
const completeSQL = `
WITH u AS (
    SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::int[], $4::text[], $5::timestamptz[], $6::int[],
                         $7::text[], $8::text[], $9::text[], $10::bool[], $11::text[], $12::timestamptz[],
                         $14::int[], $15::text[])
        AS u(id, due_time, attempt, status, run_at, retries, ref, err, dead, probe_first, outcome, started_at,
             releases, fail)
), moved AS (
    UPDATE %s p
    SET status = u.status,
        run_at = GREATEST(p.due_time, COALESCE(u.run_at, p.run_at)),
        retries = u.retries,
        probe_first = u.probe_first,
        gateway_ref = COALESCE(NULLIF(u.ref, ''), p.gateway_ref),
        last_error = COALESCE(NULLIF(u.err, ''), CASE WHEN u.outcome = '' THEN p.last_error END),
        dead_letter_reason = NULLIF(u.dead, ''),
        failure_reason = NULLIF(u.fail, ''),
        releases = u.releases,
        lease_until = NULL, lease_owner = NULL, updated_at = now(),
        attempt_outcome = NULLIF(u.outcome, ''),
        attempt_started_at = CASE WHEN u.outcome <> '' THEN u.started_at END,
        attempt_error = CASE WHEN u.outcome <> '' THEN NULLIF(u.err, '') END,
        attempt_ref = CASE WHEN u.outcome <> '' THEN NULLIF(u.ref, '') END,
        attempt_executor = $13
    FROM u
    WHERE p.id = u.id AND p.due_time = u.due_time AND p.status = 'PROCESSING' AND p.attempt = u.attempt
    RETURNING p.id, p.attempt
), attempts AS (
    INSERT INTO payment_attempts AS a (payment_id, attempt, started_at, finished_at, gateway_key, outcome, gateway_ref, error, executor_id, announced)
    SELECT u.id, u.attempt, u.started_at, now(), u.id::text, u.outcome, NULLIF(u.ref, ''), NULLIF(u.err, ''), $13,
           EXISTS (SELECT 1 FROM moved m WHERE m.id = u.id AND m.attempt = u.attempt)
    FROM u WHERE u.outcome <> ''
    ON CONFLICT (payment_id, attempt) DO UPDATE
    SET finished_at = excluded.finished_at, outcome = excluded.outcome, gateway_ref = excluded.gateway_ref,
        error = excluded.error, executor_id = excluded.executor_id, announced = false
    WHERE a.outcome = 'ABANDONED'
)
SELECT id, attempt FROM moved`

// Applied identifies a transition that was written.
type Applied struct {
	ID      uuid.UUID
	Attempt int32
}

// Complete writes ts as executor, returning the transitions that applied
// (the others were fenced out). Every transition must be one the state
// machine lets the executor make. Transitions in several partitions are
// written in one transaction: all of them or none.
func Complete(ctx context.Context, db pgdb.DB, executor string, ts []Transition) (map[Applied]bool, error) {
	applied := make(map[Applied]bool, len(ts))
	for _, t := range ts {
		if !payment.Allowed(payment.Processing, t.Status, payment.Executor) {
			return nil, fmt.Errorf("complete %s: %w: the executor may not move a payment to %q", t.ID, ErrNotAllowed, t.Status)
		}
	}
	groups := groupByPartition(len(ts), func(i int) time.Time { return ts[i].DueTime })
	err := writeGroups(ctx, db, groups, func(q pgdb.DB, g []int) error { return complete(ctx, q, executor, ts, g, applied) })
	if err != nil {
		return nil, fmt.Errorf("complete attempts: %w", err)
	}
	return applied, nil
}

// complete writes the transitions ts[g], all in one partition, into applied.
func complete(ctx context.Context, q pgdb.DB, executor string, ts []Transition, g []int, applied map[Applied]bool) error {
	n := len(g)
	ids := make([][16]byte, n)
	dues := make([]time.Time, n)
	attempts, retries, releases := make([]int32, n), make([]int32, n), make([]int32, n)
	statuses, refs, errs, deads, outcomes, fails := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	runAts := make([]*time.Time, n)
	starts := make([]time.Time, n)
	probes := make([]bool, n)
	now := time.Now()
	for j, i := range g {
		t := &ts[i]
		ids[j], dues[j], attempts[j], retries[j] = t.ID, t.DueTime, t.Attempt, t.NewRetries
		statuses[j], refs[j], errs[j], deads[j], outcomes[j] = string(t.Status), t.Ref, t.Error, string(t.DeadReason), string(t.Outcome)
		fails[j], releases[j] = string(t.FailReason), t.Releases
		if !t.RunAt.IsZero() {
			runAts[j] = &t.RunAt
		}
		starts[j] = t.StartedAt
		if starts[j].IsZero() {
			starts[j] = now
		}
		probes[j] = t.ProbeFirst
	}
	rows, err := q.Query(ctx, partitionSQL(completeSQL, dues[0]), ids, dues, attempts, statuses, runAts, retries, refs, errs, deads, probes,
		outcomes, starts, executor, releases, fails)
	if err != nil {
		return err
	}
	var a Applied
	_, err = pgx.ForEachRow(rows, []any{&a.ID, &a.Attempt}, func() error {
		applied[a] = true
		return nil
	})
	return err
}
