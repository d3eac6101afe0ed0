package store

import (
	"context"
	"fmt"
	"time"

	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// expireSQL takes back claims whose lease expired: each goes back to
// PENDING with probe_first set and one retry spent, and its attempt is
// recorded as ABANDONED.
//
// Why it is safe: every claim is dispatched to an executor, so an expired
// one may have reached the gateway. The next attempt therefore asks the
// gateway (GetCharge) before it charges again, and a cancel is refused
// while probe_first is set. The retry budget is not judged here: the
// executor alone applies payment.Backoff when it next claims the payment
// (a spent budget is dead-lettered after the probe, as RETRIES_EXHAUSTED
// only when the gateway says it was not charged). The update is fenced on
// (status, attempt) of the rows locked here, so a late executor outcome
// either lands first (and this skips the row) or is fenced out. An
// executor's real outcome later replaces the ABANDONED row.
//
// $2 bounds due_time (the day ahead of the caller's clock): only a payment
// already due can be PROCESSING, and with the bound a custom plan leaves
// out, at plan time, the year of partitions still to come. It must not be
// tighter than the database's clock, or a claim of its last seconds would
// wait for the next pass.
const expireSQL = `
WITH expired AS (
    SELECT p.id, p.due_time, p.attempt
    FROM payments p
    WHERE p.status = 'PROCESSING' AND p.lease_until < now() AND p.due_time <= $2
    ORDER BY p.lease_until
    LIMIT $1
    FOR UPDATE OF p SKIP LOCKED
), moved AS (
    UPDATE payments p
    SET status = 'PENDING', retries = p.retries + 1, probe_first = true,
        run_at = GREATEST(p.run_at, now()),
        last_error = 'lease expired: the attempt may have reached the gateway',
        lease_until = NULL, lease_owner = NULL, updated_at = now()
    FROM expired e
    WHERE p.id = e.id AND p.due_time = e.due_time AND p.status = 'PROCESSING' AND p.attempt = e.attempt
      AND p.due_time <= $2
    RETURNING p.id, p.attempt
), abandoned AS (
    INSERT INTO payment_attempts (payment_id, attempt, started_at, finished_at, gateway_key, outcome, error)
    SELECT m.id, m.attempt, now(), now(), m.id::text, 'ABANDONED', 'lease expired'
    FROM moved m
    ON CONFLICT (payment_id, attempt) DO NOTHING
)
SELECT count(*) FROM moved`

// dueBound is a due time no payment that is due (or PROCESSING) can be
// past, even by a clock somewhat ahead of ours. The statements about due
// payments take it as a parameter so that a custom plan (svc.CustomPlans)
// prunes the partitions of the days to come when planning; "due_time <=
// now()" alone prunes them only at run time, after planning and locking a
// year of them.
func dueBound() time.Time { return time.Now().Add(time.Hour) }

// ExpireLeases takes back up to batch expired leases and says how many.
func ExpireLeases(ctx context.Context, db pgdb.DB, batch int) (int, error) {
	var n int
	if err := db.QueryRow(ctx, expireSQL, batch, dueBound()).Scan(&n); err != nil {
		return 0, fmt.Errorf("expire leases: %w", err)
	}
	return n, nil
}

// OldestDueAge is how long the oldest due PENDING payment has waited (0
// when none): the first entry of the sweep index, cheap enough for every
// tick.
func OldestDueAge(ctx context.Context, db pgdb.DB) (time.Duration, error) {
	var secs float64
	err := db.QueryRow(ctx, `
		SELECT COALESCE(EXTRACT(epoch FROM now() - min(run_at)), 0)
		FROM payments WHERE status = 'PENDING' AND run_at <= now() AND due_time <= now() AND due_time <= $1`, dueBound()).Scan(&secs)
	if err != nil {
		return 0, fmt.Errorf("oldest due age: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// Overdue reports whether a payment due more than `by` ago is still
// unclaimed: the engine is that far behind. It reads the sweep's own
// partial index and stops at the first row.
func Overdue(ctx context.Context, db pgdb.DB, by time.Duration) (bool, error) {
	var behind bool
	err := db.QueryRow(ctx, `
		SELECT EXISTS (
		    SELECT 1 FROM payments
		    WHERE status = 'PENDING' AND run_at <= now() - $2::interval AND due_time <= now() AND due_time <= $1)`,
		dueBound(), by).Scan(&behind)
	if err != nil {
		return false, fmt.Errorf("check for overdue payments: %w", err)
	}
	return behind, nil
}

// Counts are the schedule's sizes.
type Counts struct {
	// Backlog: due PENDING payments.
	Backlog int64
	// Processing: claimed payments.
	Processing int64
}

// Count reads every due and every PROCESSING row: at a spike of a million
// that takes ~250 ms of a database core, so callers space it out.
func Count(ctx context.Context, db pgdb.DB) (Counts, error) {
	var c Counts
	err := db.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM payments WHERE status = 'PENDING' AND run_at <= now() AND due_time <= now() AND due_time <= $1),
		       (SELECT count(*) FROM payments WHERE lease_until IS NOT NULL AND status = 'PROCESSING' AND due_time <= $1)`,
		dueBound()).Scan(&c.Backlog, &c.Processing)
	if err != nil {
		return c, fmt.Errorf("count the schedule: %w", err)
	}
	return c, nil
}

// expireKeysSQL forgets the idempotency records of a batch of payment_index
// rows after seq $1 created before $2, walking seq order (created_at grows
// with seq, so no extra index). It returns how many were old and the
// highest seq among them. The payment is kept; its key may be used again.
const expireKeysSQL = `
WITH batch AS (
    SELECT seq, created_at FROM payment_index
    WHERE seq > $1 ORDER BY seq LIMIT $3
), old AS (
    SELECT seq FROM batch WHERE created_at < $2
), forgot AS (
    UPDATE payment_index i SET idempotency_key = NULL, request_hash = NULL, response = NULL
    FROM old o WHERE i.seq = o.seq AND i.idempotency_key IS NOT NULL
)
SELECT count(*), max(seq) FROM old`

// ExpireKeys forgets up to batch idempotency records created before cutoff,
// after the watermark seq from; it returns how many it looked at as old and
// the new watermark (from when none).
func ExpireKeys(ctx context.Context, db pgdb.DB, from int64, cutoff time.Time, batch int) (int, int64, error) {
	var n int
	var top *int64
	if err := db.QueryRow(ctx, expireKeysSQL, from, cutoff, batch).Scan(&n, &top); err != nil {
		return 0, from, fmt.Errorf("expire keys: %w", err)
	}
	if top != nil {
		from = *top
	}
	return n, from, nil
}
