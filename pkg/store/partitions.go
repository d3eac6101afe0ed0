package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// Partition is the name of the daily partition of payments that holds the
// rows due at t, as paysched_ensure_partitions names it.
func Partition(due time.Time) string { return "payments_p" + due.UTC().Format("20060102") }

// partitionSQL puts the partition of rows due at due, quoted, into a
// statement written with %s for the table. The engine's batch statements
// name their partition instead of the parent, because they are planned for
// every call (svc.CustomPlans): a plan of the parent plans a year of
// partitions, and a cached generic one locks them all on every execution
// and keeps whatever shape the statistics suggested when it was made (a
// sequential scan, if that was while the partition was still empty).
func partitionSQL(stmt string, due time.Time) string {
	return fmt.Sprintf(stmt, pgx.Identifier{Partition(due)}.Sanitize())
}

// groupByPartition returns the indexes 0..n-1 grouped by the partition of
// due(i), groups in order of first appearance. A spike's batch is one
// group; retries and re-drives may add others.
func groupByPartition(n int, due func(i int) time.Time) [][]int {
	if n == 0 {
		return nil
	}
	first := Partition(due(0))
	same := true
	for i := 1; i < n && same; i++ {
		same = Partition(due(i)) == first
	}
	if same {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	at := map[string]int{}
	var groups [][]int
	for i := 0; i < n; i++ {
		name := Partition(due(i))
		g, ok := at[name]
		if !ok {
			g = len(groups)
			at[name] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// writeGroups runs write on each group of indexes (groupByPartition), in
// one transaction when there are several: all of them or none. One group,
// the common case, is one statement in its own implicit transaction.
func writeGroups(ctx context.Context, db pgdb.DB, groups [][]int, write func(q pgdb.DB, g []int) error) error {
	each := func(q pgdb.DB) error {
		for _, g := range groups {
			if err := write(q, g); err != nil {
				return err
			}
		}
		return nil
	}
	if len(groups) > 1 {
		return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return each(tx) })
	}
	return each(db)
}

// missingPartition reports an error from naming a partition that does not
// exist (dropped by retention): its payments are gone, so a statement on
// them changes nothing.
func missingPartition(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// EnsurePartitions creates the daily partitions of payments covering
// [from, to] (UTC days) that do not exist yet, and returns how many it made.
// The reaper calls it to keep the horizon ahead; the API calls it at start.
func EnsurePartitions(ctx context.Context, db pgdb.DB, from, to time.Time) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT paysched_ensure_partitions($1::date, $2::date)`,
		from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("ensure partitions %s..%s: %w", from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly), err)
	}
	return n, nil
}

// RetentionFloor is the shortest retention the database accepts
// (paysched_retention_floor, migration 12): a partition is dropped only
// once its day is at least this far behind, and only if every payment in
// it is at an end.
const RetentionFloor = 30 * 24 * time.Hour

// DropPartitionsBefore drops the daily partitions of payments whose day
// is before cutoff's (retention) and says how many. Dropping a table takes
// its owner, so it goes through paysched_drop_partitions_before, which
// runs as the schema's owner for the roles allowed to call it (the
// reaper's); it refuses a cutoff within RetentionFloor and keeps a
// partition that still holds a PENDING, PROCESSING or DEAD_LETTERED
// payment.
func DropPartitionsBefore(ctx context.Context, db pgdb.DB, cutoff time.Time) (int, error) {
	var n int
	day := cutoff.UTC().Format(time.DateOnly)
	if err := db.QueryRow(ctx, `SELECT paysched_drop_partitions_before($1::date)`, day).Scan(&n); err != nil {
		return 0, fmt.Errorf("drop partitions before %s: %w", cutoff.UTC().Format(time.DateOnly), err)
	}
	return n, nil
}
