// Package pacing paces claims to the gateway's rate ceiling across every
// sweeper, with one token bucket row in Postgres.
package pacing

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/engine/pacing/bucketdb"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

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
		// Refill locks the bucket's row: the cluster's sweepers take one
		// after another, and together never more than the rate allows.
		q := bucketdb.New(tx)
		avail, err := q.Refill(ctx, bucketdb.RefillParams{Name: b.Name, Rate: b.Rate, Burst: b.Burst})
		if err != nil {
			return err
		}
		got = min(want, int(avail))
		if got <= 0 {
			got = 0
			return nil
		}
		return q.Spend(ctx, bucketdb.SpendParams{Name: b.Name, N: float64(got)})
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
	if err := bucketdb.New(db).Refund(ctx, bucketdb.RefundParams{Name: b.Name, N: float64(n), Burst: b.Burst}); err != nil {
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
		q := bucketdb.New(tx)
		if err := q.EnsureBuckets(ctx, bucketdb.EnsureBucketsParams{Names: names, Bursts: bursts}); err != nil {
			return err
		}
		rows, err := q.LockBuckets(ctx, names)
		if err != nil {
			return err
		}
		left := make([]float64, len(bs))
		var now time.Time
		for _, r := range rows {
			i, ok := at[r.Name]
			if !ok {
				continue
			}
			b := bs[i]
			avail := min(max(b.Burst, 1), r.Tokens+b.Rate*max(r.Elapsed, 0))
			got[i] = max(0, min(want[i], int(avail)))
			left[i], now = avail-float64(got[i]), r.Now
		}
		return q.SetBuckets(ctx, bucketdb.SetBucketsParams{Names: names, Tokens: left, Now: now})
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
		q := bucketdb.New(tx)
		if err := q.LockBucketNames(ctx, names); err != nil {
			return err
		}
		return q.RefundBuckets(ctx, bucketdb.RefundBucketsParams{Names: names, Back: back, Bursts: bursts})
	})
	if err != nil {
		return fmt.Errorf("refund rate tokens of %d buckets: %w", len(names), err)
	}
	return nil
}
