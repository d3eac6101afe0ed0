package pacing_test

import (
	"context"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestBucketPacesAcrossCallers: with a rate of 100/s and a burst of 10,
// many callers together get about the rate, never much more.
func TestBucketPacesAcrossCallers(t *testing.T) {
	db := pgtest.NewPool(t)
	b := pacing.Bucket{Name: "gateway", Rate: 100, Burst: 10}
	ctx := context.Background()
	got := 0
	start := time.Now()
	for time.Since(start) < time.Second {
		n, err := b.Take(ctx, db, 7)
		if err != nil {
			t.Fatal(err)
		}
		if n < 0 || n > 7 {
			t.Fatalf("took %d of 7", n)
		}
		got += n
	}
	if got > 115 || got < 60 {
		t.Fatalf("took %d tokens in 1 s at 100/s with burst 10", got)
	}
	if err := b.Refund(ctx, db, 5); err != nil {
		t.Fatal(err)
	}
	unlimited := pacing.Bucket{Name: "none"}
	if n, err := unlimited.Take(ctx, db, 500); err != nil || n != 500 {
		t.Fatalf("no ceiling: %d %v", n, err)
	}
}
