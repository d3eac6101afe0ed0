// Package pacing paces claims to the gateway's rate ceiling across every
// sweeper, with one token bucket row in Postgres.
package pacing

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/store"
)

// takeSQL refills the cluster-wide bucket $1 at $2 tokens/s up to a burst
// of $3 and returns what it holds; the caller spends from it in the same
// transaction. The row lock serializes sweepers, so the whole cluster
// together never takes more than the rate allows.
const takeSQL = `
INSERT INTO rate_buckets AS b (name, tokens, refreshed_at) VALUES ($1, $3, clock_timestamp())
ON CONFLICT (name) DO UPDATE
SET tokens = LEAST($3::float8, b.tokens + $2::float8 * extract(epoch FROM clock_timestamp() - b.refreshed_at)),
    refreshed_at = clock_timestamp()
RETURNING tokens`

const spendSQL = `UPDATE rate_buckets SET tokens = tokens - $2 WHERE name = $1`

// Bucket paces claims to a gateway rate ceiling across every sweeper.
type Bucket struct {
	Name  string
	Rate  float64 // tokens per second; <= 0 means no ceiling
	Burst float64
}

// Take returns how many of want may be claimed now (0..want).
func (b Bucket) Take(ctx context.Context, db store.DB, want int) (int, error) {
	if b.Rate <= 0 {
		return want, nil
	}
	var got int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var avail float64
		if err := tx.QueryRow(ctx, takeSQL, b.Name, b.Rate, b.Burst).Scan(&avail); err != nil {
			return err
		}
		got = min(want, int(avail))
		if got <= 0 {
			got = 0
			return nil
		}
		_, err := tx.Exec(ctx, spendSQL, b.Name, got)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("take rate tokens: %w", err)
	}
	return got, nil
}

// Refund gives back tokens taken but not used (fewer rows were due).
func (b Bucket) Refund(ctx context.Context, db store.DB, n int) error {
	if b.Rate <= 0 || n <= 0 {
		return nil
	}
	if _, err := db.Exec(ctx, `UPDATE rate_buckets SET tokens = LEAST($3::float8, tokens + $2) WHERE name = $1`, b.Name, n, b.Burst); err != nil {
		return fmt.Errorf("refund rate tokens: %w", err)
	}
	return nil
}
