// Package pacing paces claims to the gateway's rate ceiling across every
// sweeper, with one token bucket row in Postgres.
package pacing

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/paysched/paysched/pkg/platform/pgdb"
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
func (b Bucket) Take(ctx context.Context, db pgdb.DB, want int) (int, error) {
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
func (b Bucket) Refund(ctx context.Context, db pgdb.DB, n int) error {
	if b.Rate <= 0 || n <= 0 {
		return nil
	}
	if _, err := db.Exec(ctx, `UPDATE rate_buckets SET tokens = LEAST($3::float8, tokens + $2) WHERE name = $1`, b.Name, n, b.Burst); err != nil {
		return fmt.Errorf("refund rate tokens: %w", err)
	}
	return nil
}

// TakeEach takes up to want[i] tokens from each bucket bs[i] (each its own
// rate and burst), in one transaction, and returns what each granted. The
// rows are locked in name order, so sweepers taking several at once never
// deadlock; the tenants' rate caps use it, one statement set per round.
func TakeEach(ctx context.Context, db pgdb.DB, bs []Bucket, want []int) ([]int, error) {
	got := make([]int, len(bs))
	if len(bs) == 0 {
		return got, nil
	}
	names := make([]string, len(bs))
	bursts := make([]float64, len(bs))
	at := make(map[string]int, len(bs))
	for i, b := range bs {
		names[i], bursts[i], at[b.Name] = b.Name, max(b.Burst, 1), i
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO rate_buckets (name, tokens, refreshed_at)
SELECT n, b, clock_timestamp() FROM unnest($1::text[], $2::float8[]) AS u(n, b) ORDER BY n
ON CONFLICT (name) DO NOTHING`, names, bursts); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
SELECT name, tokens, extract(epoch FROM clock_timestamp() - refreshed_at)::float8, clock_timestamp()
FROM rate_buckets WHERE name = ANY($1) ORDER BY name FOR UPDATE`, names)
		if err != nil {
			return err
		}
		left := make([]float64, len(bs))
		var now any
		var name string
		var tokens, elapsed float64
		var ts pgtype.Timestamptz
		_, err = pgx.ForEachRow(rows, []any{&name, &tokens, &elapsed, &ts}, func() error {
			i, ok := at[name]
			if !ok {
				return nil
			}
			b := bs[i]
			avail := min(max(b.Burst, 1), tokens+b.Rate*max(elapsed, 0))
			got[i] = max(0, min(want[i], int(avail)))
			left[i], now = avail-float64(got[i]), ts
			return nil
		})
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
UPDATE rate_buckets b SET tokens = u.t, refreshed_at = $3
FROM unnest($1::text[], $2::float8[]) AS u(n, t) WHERE b.name = u.n`, names, left, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("take rate tokens of %d buckets: %w", len(bs), err)
	}
	return got, nil
}

// RefundEach gives back n[i] tokens taken from bs[i] but not used.
func RefundEach(ctx context.Context, db pgdb.DB, bs []Bucket, n []int) error {
	var names []string
	var back, bursts []float64
	for i, b := range bs {
		if n[i] > 0 {
			names, back, bursts = append(names, b.Name), append(back, float64(n[i])), append(bursts, max(b.Burst, 1))
		}
	}
	if len(names) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// In name order, as TakeEach locks them.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM rate_buckets WHERE name = ANY($1) ORDER BY name FOR UPDATE`, names); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
UPDATE rate_buckets b SET tokens = LEAST(u.burst, b.tokens + u.back)
FROM unnest($1::text[], $2::float8[], $3::float8[]) AS u(n, back, burst) WHERE b.name = u.n`, names, back, bursts)
		return err
	})
	if err != nil {
		return fmt.Errorf("refund rate tokens of %d buckets: %w", len(names), err)
	}
	return nil
}
