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

// Claimed is one payment a sweeper now holds under a lease: the row's key
// and its fencing token. What a charge needs the executor reads from the
// row itself (Load), so a forged or stale request cannot change it.
type Claimed struct {
	ID      uuid.UUID
	DueTime time.Time
	RunAt   time.Time
	Attempt int32
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
RETURNING p.id, p.due_time, p.run_at, p.attempt`

// releaseSQL hands claims back to PENDING. It serves two callers: the
// sweeper, for a batch an executor refused untouched (RESOURCE_EXHAUSTED or
// ABORTED before any progress), and the executor, for an item it decided
// not to start (its lease would end before the call's deadline).
//
// Why it is safe: no attempt of this claim reached the gateway, by the
// callers' contract: a claim is started only by the one executor the
// sweeper gave it to, and that executor either refused the whole batch
// before reading it or is the caller itself. The statement is fenced on
// (status, attempt, lease owner), so a claim the reaper took back or
// another process moved is left alone. The attempt number stays
// incremented, so a late holder of the old token is still fenced out;
// retries and probe_first are untouched, so a release costs no budget and
// forgets no doubt. A sweeper that cannot tell whether its request reached
// the executor (a transport error) does not release: the lease expires and
// the next attempt asks the gateway first.
const releaseSQL = `
UPDATE payments p
SET status = 'PENDING', lease_until = NULL, lease_owner = NULL, updated_at = now()
FROM unnest($1::uuid[], $2::timestamptz[], $3::int[]) AS u(id, due_time, attempt)
WHERE p.id = u.id AND p.due_time = u.due_time AND p.status = 'PROCESSING'
  AND p.attempt = u.attempt AND p.lease_owner = $4
  AND p.id = ANY ($1::uuid[]) AND p.due_time >= $5 AND p.due_time <= $6 -- an index path, no partition scan`

// Release returns claims no attempt started to PENDING (see releaseSQL for
// who may call it) and says how many.
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

// Claim claims up to limit due payments for owner, each leased for lease.
func Claim(ctx context.Context, db DB, owner string, lease time.Duration, limit int) ([]Claimed, error) {
	rows, err := db.Query(ctx, claimSQL, owner, lease, limit)
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
		var c Claimed
		err := r.Scan(&c.ID, &c.DueTime, &c.RunAt, &c.Attempt)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	return out, nil
}
