package store

// The claim is the heart of the engine: it must hand each due PENDING row
// to at most one sweeper at a time, oldest first, without a coordinator.

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// Claimed is one payment a sweeper now holds under a lease: the row's key
// and its fencing token. What a charge needs the executor reads from the
// row itself (Load), so a forged or stale request cannot change it.
type Claimed struct {
	ID      uuid.UUID
	DueTime time.Time
	RunAt   time.Time
	Attempt int32
	// Tenant is whom the payment is scheduled for (fair claims count it).
	Tenant string
}

// claimSQL claims up to $3 due rows of one partition (%s) for owner $1
// with lease $2.
//
// Why it is safe: FOR UPDATE SKIP LOCKED gives each row to one claimer; rows
// another transaction holds (a claim, a cancel) are passed by, and a row
// changed by a committed transaction is re-checked against status='PENDING'
// before it is locked. The UPDATE then changes exactly the rows this
// statement locked (by their tuple ids, which cannot change while this
// transaction holds their locks), and repeats the status test so it is
// conditional on its own. attempt+1 is the fencing token the executor's
// outcome write must match.
//
// Why it is one partition: the statement is planned for each call (the
// engine's pools plan custom: docs/DESIGN.md, "Schema"), and a plan of the
// parent would plan a year of partitions each time. run_at >= due_time
// always holds, so only partitions whose day has begun can hold due rows
// (see Claimer).
const claimSQL = `
WITH due AS (
    SELECT ctid FROM %[1]s
    WHERE status = 'PENDING' AND run_at <= now()
    ORDER BY run_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)` + claimDueSQL

// claimDueSQL is every claim's write: the rows its CTE due locked become
// PROCESSING for owner $1 under lease $2, at the next attempt (the fencing
// token), in partition %[1]s.
//
// The rows are reached by their tuple ids as an array (a TID scan), never
// by a join on ctid: the planner cannot know how many rows a fair claim's
// per-tenant LIMITs return, guessed a tenth of the partition, and joined by
// hashing every PENDING row of it, a second per claim once a million were
// due (TestBatchStatementsReadByKey).
const claimDueSQL = `
UPDATE %[1]s p
SET status = 'PROCESSING', lease_until = now() + $2::interval, lease_owner = $1,
    attempt = p.attempt + 1, updated_at = now()
WHERE p.ctid = ANY (ARRAY(SELECT ctid FROM due)) AND p.status = 'PENDING'
RETURNING p.id, p.due_time, p.run_at, p.attempt, p.tenant`

// pendingSQL says whether a partition (%s) holds a PENDING row: one probe
// of its sweep index.
const pendingSQL = `SELECT EXISTS (SELECT 1 FROM %s WHERE status = 'PENDING')`

// partitionsSQL lists the daily partitions of payments up to $1, oldest
// first.
const partitionsSQL = `
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'payments'::regclass AND c.relname <= $1 ORDER BY c.relname`

// Claimer claims due payments for one sweeper, partition by partition,
// oldest day first. Only a partition whose day has begun can hold a due
// row; of those, it asks yesterday's and today's every time, and older
// ones only if they held a PENDING row when it last looked (every
// Refresh): a payment of an older day becomes PENDING again only by a
// retry, an expired lease or a re-drive, and waits at most Refresh more.
// A Claimer is one sweeper loop's: not for concurrent use.
type Claimer struct {
	DB    pgdb.DB
	Owner string
	Lease time.Duration
	// Refresh is how often older partitions are looked at again (default 5s).
	Refresh time.Duration
	// Now is the clock that picks the days (nil: time.Now); a test sets
	// it to either side of a midnight. What is due is the database's
	// clock's to say.
	Now func() time.Time

	older  []time.Time // days before yesterday that held PENDING rows
	seenAt time.Time

	names      []string // partitions before yesterday, as last listed
	listedAt   time.Time
	listedUpto string
}

// partitionsEvery is how often a Claimer lists the partitions again.
const partitionsEvery = 10 * time.Minute

// days returns the days whose partitions may hold a due row, oldest first.
func (c *Claimer) days(ctx context.Context) ([]time.Time, error) {
	now := time.Now().UTC()
	if c.Now != nil {
		now = c.Now().UTC()
	}
	refresh := c.Refresh
	if refresh <= 0 {
		refresh = 5 * time.Second
	}
	if c.seenAt.IsZero() || now.Sub(c.seenAt) >= refresh {
		older, err := c.olderPending(ctx, now.AddDate(0, 0, -2))
		if err != nil {
			return nil, err
		}
		c.older, c.seenAt = older, now
	}
	days := append(c.older[:len(c.older):len(c.older)], now.AddDate(0, 0, -1), now)
	if next := now.Add(time.Minute); next.Day() != now.Day() {
		// The database's clock may be ahead of ours near midnight.
		days = append(days, next)
	}
	return days, nil
}

// Claim claims up to limit due payments, oldest run_at first, whoever
// their tenant. On an error it still returns the claims made before it
// (they are held: the caller must dispatch them).
func (c *Claimer) Claim(ctx context.Context, limit int) ([]Claimed, error) {
	days, err := c.days(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim batch: %w", err)
	}
	var out []Claimed
	for _, d := range days {
		if len(out) >= limit {
			break
		}
		got, err := claimIn(ctx, c.DB, d, c.Owner, c.Lease, limit-len(out))
		if err != nil {
			return out, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// claimIn claims up to limit due rows of the partition of day.
func claimIn(ctx context.Context, db pgdb.DB, day time.Time, owner string, lease time.Duration, limit int) ([]Claimed, error) {
	rows, err := db.Query(ctx, partitionSQL(claimSQL, day), owner, lease, limit)
	if missingPartition(err) {
		return nil, nil // a day the schedule has no partition for holds no payment
	}
	if err != nil {
		return nil, fmt.Errorf("claim batch in %s: %w", Partition(day), err)
	}
	out := make([]Claimed, 0, limit)
	var c Claimed
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.DueTime, &c.RunAt, &c.Attempt, &c.Tenant}, func() error {
		out = append(out, c)
		return nil
	})
	if err != nil && !missingPartition(err) {
		return nil, fmt.Errorf("claim batch in %s: %w", Partition(day), err)
	}
	return out, nil
}

// olderPending returns the days up to upto whose partitions hold a PENDING
// row, oldest first, probing every partition in one round trip. The list
// of partitions is read again at most every partitionsEvery: reading the
// catalog took longer than all the probes during a spike, and partitions
// of days past change only when retention drops them.
func (c *Claimer) olderPending(ctx context.Context, upto time.Time) ([]time.Time, error) {
	if c.listedAt.IsZero() || time.Since(c.listedAt) >= partitionsEvery || c.listedUpto != Partition(upto) {
		rows, err := c.DB.Query(ctx, partitionsSQL, Partition(upto))
		if err != nil {
			return nil, fmt.Errorf("list partitions: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("list partitions: %w", err)
		}
		c.names, c.listedAt, c.listedUpto = names, time.Now(), Partition(upto)
	}
	if len(c.names) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	for _, n := range c.names {
		b.Queue(fmt.Sprintf(pendingSQL, pgx.Identifier{n}.Sanitize()))
	}
	res := c.DB.SendBatch(ctx, b)
	defer res.Close()
	var days []time.Time
	for _, n := range c.names {
		var any bool
		err := res.QueryRow().Scan(&any)
		if missingPartition(err) {
			c.listedAt = time.Time{} // dropped since: list again next time
			return days, nil
		}
		if err != nil {
			return nil, fmt.Errorf("look for pending payments in %s: %w", n, err)
		}
		if day, err := time.Parse("payments_p20060102", n); any && err == nil {
			days = append(days, day)
		}
	}
	return days, nil
}

// releaseSQL hands claims back to PENDING: the sweeper's, for a batch an
// executor refused untouched (RESOURCE_EXHAUSTED or ABORTED before any
// progress). The executor's own release of an item it decided not to start
// (its lease would end before the call's deadline) is a transition of
// Complete.
//
// Why it is safe: no attempt of this claim reached the gateway, by the
// caller's contract: a claim is started only by the one executor the
// sweeper gave it to, and that executor refused the whole batch before
// reading it. The statement is fenced on
// (status, attempt, lease owner), so a claim the reaper took back or
// another process moved is left alone. The attempt number stays
// incremented, so a late holder of the old token is still fenced out;
// retries are untouched, so a release costs no budget. It sets probe_first:
// the database cannot tell a batch refused untouched from one a
// compromised sweeper dispatched and then took back, so the guard (0016)
// refuses a sweeper's move back to PENDING without it; the cost is one
// probe on the next attempt of a payment released this way, which is rare
// (an executor at its in-flight cap). A sweeper that cannot tell whether
// its request reached the executor (a transport error) does not release:
// the lease expires and the next attempt asks the gateway first.
//
// It names its partition (%s), as the engine's batch statements do (see
// partitionSQL).
const releaseSQL = `
UPDATE %s p
SET status = 'PENDING', probe_first = true, lease_until = NULL, lease_owner = NULL, updated_at = now()
FROM unnest($1::uuid[], $2::timestamptz[], $3::int[]) AS u(id, due_time, attempt)
WHERE p.id = u.id AND p.due_time = u.due_time AND p.status = 'PROCESSING'
  AND p.attempt = u.attempt AND p.lease_owner = $4`

// Release returns claims no attempt started to PENDING (see releaseSQL for
// who may call it) and says how many. Claims in several partitions are
// released in one transaction.
func Release(ctx context.Context, db pgdb.DB, owner string, cs []Claimed) (int64, error) {
	groups := groupByPartition(len(cs), func(i int) time.Time { return cs[i].DueTime })
	var n int64
	err := writeGroups(ctx, db, groups, func(q pgdb.DB, g []int) error {
		ids := make([][16]byte, len(g))
		dues := make([]time.Time, len(g))
		attempts := make([]int32, len(g))
		for j, i := range g {
			ids[j], dues[j], attempts[j] = cs[i].ID, cs[i].DueTime, cs[i].Attempt
		}
		tag, err := q.Exec(ctx, partitionSQL(releaseSQL, dues[0]), ids, dues, attempts, owner)
		n += tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("release claims: %w", err)
	}
	return n, nil
}

// Claim claims up to limit due payments for owner, each leased for lease,
// looking at every partition that may hold one (a Claimer used once).
func Claim(ctx context.Context, db pgdb.DB, owner string, lease time.Duration, limit int) ([]Claimed, error) {
	return (&Claimer{DB: db, Owner: owner, Lease: lease}).Claim(ctx, limit)
}
