// Package pgtally reads keyed figures out of Postgres for the tools'
// checks and live views: a query of (key, number) rows, such as a count
// by status or an amount by payment, becomes a map from key to number.
// It sits under tools/internal so that only the tools can use it: the
// product never depends on a harness.
package pgtally

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Querier is what ByKey reads through: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ByKey runs sql with args, whose rows are (key text, number bigint), and
// returns them as a map; a key seen twice keeps its last number. Errors
// are pgx's own: the caller names what it was reading.
func ByKey(ctx context.Context, db Querier, sql string, args ...any) (map[string]int64, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var k string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil })
	return out, err
}
