package store

// The claim is the heart of the engine: it must hand each due PENDING row
// to at most one sweeper at a time, oldest first, without a coordinator.

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Claimed is one payment a sweeper now holds under a lease.
type Claimed struct {
	ID       uuid.UUID
	DueTime  time.Time
	RunAt    time.Time
	Attempt  int32
	Retries  int32
	Payer    string
	Payee    string
	Amount   int64
	Currency string
}

// claimSQL claims up to $3 due rows for owner $1 with lease $2.
//
// Why it is safe: FOR UPDATE SKIP LOCKED gives each row to one claimer; rows
// another transaction holds (a claim, a cancel) are passed by, and a row
// changed by a committed transaction is re-checked against status='PENDING'
// before it is locked. The UPDATE then changes exactly the rows this
// statement locked, and repeats the status test so it is conditional on its
// own. attempt+1 is the fencing token the executor's outcome write must
// match.
//
// Why it is fast: "due_time <= now()" prunes the partitions whose day has
// not begun (run_at >= due_time always holds), and the locked ids are
// updated through the primary key (id = ANY) within the locked rows'
// due_time range, rather than a join that would scan every partition.
const claimSQL = `
WITH due AS (
    SELECT id, due_time FROM payments
    WHERE status = 'PENDING' AND run_at <= now() AND due_time <= now()
    ORDER BY run_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE payments p
SET status = 'PROCESSING', lease_until = now() + $2::interval, lease_owner = $1,
    attempt = p.attempt + 1, updated_at = now()
WHERE p.id = ANY (ARRAY(SELECT id FROM due))
  AND p.due_time >= (SELECT min(due_time) FROM due) AND p.due_time <= now()
  AND p.status = 'PENDING'
RETURNING p.id, p.due_time, p.run_at, p.attempt, p.retries, p.payer, p.payee, p.amount_minor, p.currency`

// releaseSQL hands claims that no executor started back to PENDING.
//
// Why it is safe: a claim is released only while it is still ours at that
// attempt (status, attempt and lease_owner all match) and no attempt row
// exists, i.e. no executor began it. The attempt number stays incremented,
// so a late executor holding the old token is still fenced out; retries is
// untouched, so releasing costs no budget. Were an executor to start it
// anyway, the gateway key (the paymentId) would still make it one charge.
const releaseSQL = `
UPDATE payments p
SET status = 'PENDING', lease_until = NULL, lease_owner = NULL, updated_at = now()
FROM unnest($1::uuid[], $2::timestamptz[], $3::int[]) AS u(id, due_time, attempt)
WHERE p.id = u.id AND p.due_time = u.due_time AND p.status = 'PROCESSING'
  AND p.attempt = u.attempt AND p.lease_owner = $4
  AND p.id = ANY ($1::uuid[]) AND p.due_time >= $5 AND p.due_time <= $6 -- an index path, no partition scan
  AND NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.payment_id = u.id AND a.attempt = u.attempt)`

// releaseOwnerSQL releases every unstarted claim of an owner (shutdown).
const releaseOwnerSQL = `
UPDATE payments p
SET status = 'PENDING', lease_until = NULL, lease_owner = NULL, updated_at = now()
WHERE p.status = 'PROCESSING' AND p.lease_owner = $1
  AND NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.payment_id = p.id AND a.attempt = p.attempt)`

// Release returns undispatched claims to PENDING and says how many.
func Release(ctx context.Context, db DB, owner string, cs []Claimed) (int64, error) {
	ids := make([][16]byte, len(cs))
	dues := make([]time.Time, len(cs))
	attempts := make([]int32, len(cs))
	for i, c := range cs {
		ids[i], dues[i], attempts[i] = c.ID, c.DueTime, c.Attempt
	}
	lo, hi := DueSpan(dues)
	tag, err := db.Exec(ctx, releaseSQL, ids, dues, attempts, owner, lo, hi)
	if err != nil {
		return 0, fmt.Errorf("release claims: %w", err)
	}
	return tag.RowsAffected(), nil
}

// DueSpan is the due_time range of a batch: with it in a statement the
// planner prunes partitions at execution time and probes primary keys
// instead of scanning every partition.
func DueSpan(dues []time.Time) (time.Time, time.Time) {
	var lo, hi time.Time
	for i, d := range dues {
		if i == 0 || d.Before(lo) {
			lo = d
		}
		if i == 0 || d.After(hi) {
			hi = d
		}
	}
	return lo, hi
}

// ReleaseOwner returns every unstarted claim held by owner to PENDING.
func ReleaseOwner(ctx context.Context, db DB, owner string) (int64, error) {
	tag, err := db.Exec(ctx, releaseOwnerSQL, owner)
	if err != nil {
		return 0, fmt.Errorf("release claims of %s: %w", owner, err)
	}
	return tag.RowsAffected(), nil
}

// Claim claims up to limit due payments for owner, each leased for lease.
func Claim(ctx context.Context, db DB, owner string, lease time.Duration, limit int) ([]Claimed, error) {
	rows, err := db.Query(ctx, claimSQL, owner, lease, limit)
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
		var c Claimed
		err := r.Scan(&c.ID, &c.DueTime, &c.RunAt, &c.Attempt, &c.Retries, &c.Payer, &c.Payee, &c.Amount, &c.Currency)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	return out, nil
}
