package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnsurePartitions creates the daily partitions of payments covering
// [from, to] (UTC days) that do not exist yet, and returns how many it made.
// The reaper calls it to keep the horizon ahead; the API calls it at start.
func EnsurePartitions(ctx context.Context, db DB, from, to time.Time) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT paysched_ensure_partitions($1::date, $2::date)`,
		from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("ensure partitions %s..%s: %w", from.UTC().Format(time.DateOnly), to.UTC().Format(time.DateOnly), err)
	}
	return n, nil
}

// DropPartitionsBefore drops the daily partitions of payments that ended
// before cutoff (retention) and says how many.
func DropPartitionsBefore(ctx context.Context, db DB, cutoff time.Time) (int, error) {
	rows, err := db.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'payments'::regclass AND c.relname < $1 ORDER BY 1`,
		"payments_p"+cutoff.UTC().Format("20060102"))
	if err != nil {
		return 0, fmt.Errorf("list partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("list partitions: %w", err)
	}
	for _, n := range names {
		if _, err := db.Exec(ctx, `DROP TABLE `+pgx.Identifier{n}.Sanitize()); err != nil {
			return 0, fmt.Errorf("drop %s: %w", n, err)
		}
	}
	return len(names), nil
}
