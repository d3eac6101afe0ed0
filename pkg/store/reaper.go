package store

import (
	"context"
	"fmt"
	"time"

	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store/reaperdb"
)

// dueBound is a due time no payment that is due (or PROCESSING) can be
// past, even by a clock somewhat ahead of ours. The statements about due
// payments take it as a parameter so that a custom plan (svc.CustomPlans)
// prunes the partitions of the days to come when planning; "due_time <=
// now()" alone prunes them only at run time, after planning and locking a
// year of them.
func dueBound() time.Time { return time.Now().Add(time.Hour) }

// ExpireLeases takes back up to batch expired leases and says how many.
func ExpireLeases(ctx context.Context, db pgdb.DB, batch int) (int, error) {
	// Why it is safe: reaperdb/reaper.sql, ExpireLeases.
	n, err := reaperdb.New(db).ExpireLeases(ctx, reaperdb.ExpireLeasesParams{Batch: int32(batch), Bound: dueBound()})
	if err != nil {
		return 0, fmt.Errorf("expire leases: %w", err)
	}
	return int(n), nil
}

// OldestDueAge is how long the oldest due PENDING payment has waited (0
// when none): the first entry of the sweep index, cheap enough for every
// tick.
func OldestDueAge(ctx context.Context, db pgdb.DB) (time.Duration, error) {
	secs, err := reaperdb.New(db).OldestDueAge(ctx, dueBound())
	if err != nil {
		return 0, fmt.Errorf("oldest due age: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// Overdue reports whether a payment due more than `by` ago is still
// unclaimed: the engine is that far behind. It reads the sweep's own
// partial index and stops at the first row.
func Overdue(ctx context.Context, db pgdb.DB, by time.Duration) (bool, error) {
	behind, err := reaperdb.New(db).Overdue(ctx, reaperdb.OverdueParams{By: by, Bound: dueBound()})
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
	row, err := reaperdb.New(db).CountSchedule(ctx, dueBound())
	if err != nil {
		return Counts{}, fmt.Errorf("count the schedule: %w", err)
	}
	return Counts{Backlog: row.Backlog, Processing: row.Processing}, nil
}

// ExpireKeys forgets up to batch idempotency records created before cutoff,
// after the watermark seq from; it returns how many it looked at as old and
// the new watermark (from when none).
func ExpireKeys(ctx context.Context, db pgdb.DB, from int64, cutoff time.Time, batch int) (int, int64, error) {
	row, err := reaperdb.New(db).ExpireKeys(ctx, reaperdb.ExpireKeysParams{After: from, Cutoff: cutoff, Batch: int32(batch)})
	if err != nil {
		return 0, from, fmt.Errorf("expire keys: %w", err)
	}
	return int(row.N), row.Top, nil
}
