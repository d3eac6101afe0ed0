package audit

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/kafkatest"
	"github.com/paysched/paysched/test/pgtest"
)

// A batch is held back while a payment is overdue and unclaimed, until the
// payment is claimed or the batch reaches MaxDefer; it is never held when
// nothing is overdue, nor with MaxDefer zero. What is measured is the time
// yield counted as waited (its deferred counter), not the wall time around
// it: the overdue query itself may be slow on a loaded machine, and that is
// not holding back.
func TestYieldWhilePaymentsAreOverdue(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	now := time.Now()
	if _, err := store.EnsurePartitions(ctx, db, now.Add(-24*time.Hour), now.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	seeds := kafkatest.NewCluster(t)
	consumer := func(maxDefer time.Duration) *Consumer {
		c, err := New(Config{Brokers: seeds, Group: "audit", MaxDefer: maxDefer}, db, nil, prometheus.NewRegistry(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	fresh := func() *batch {
		return (&Consumer{log: quiet}).decode([]*kgo.Record{change(1, paymentUUID(1), "PENDING")})
	}
	// held runs yield on b and returns the time it counted as held back.
	held := func(c *Consumer, b *batch) time.Duration {
		if err := c.yield(ctx, b); err != nil {
			t.Fatal(err)
		}
		return time.Duration(testutil.ToFloat64(c.m.deferred) * float64(time.Second))
	}
	const bound = 3 * time.Second

	if d := held(consumer(bound), fresh()); d != 0 {
		t.Fatalf("nothing overdue: held %v", d)
	}

	// A payment due five seconds ago and not claimed: the engine is behind.
	id := paymentUUID(7)
	if _, err := db.Exec(ctx, `INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at)
		VALUES ($1, 'payer', 'payee', 100, 'EUR', now() - interval '5 seconds', now() - interval '5 seconds')`, id); err != nil {
		t.Fatal(err)
	}
	if d := held(consumer(0), fresh()); d != 0 {
		t.Fatalf("MaxDefer 0: held %v", d)
	}
	// The first check's own time is taken from the bound, not waited.
	if d := held(consumer(bound), fresh()); d < bound/2 || d > bound {
		t.Fatalf("overdue payment: held %v, want about MaxDefer (%v)", d, bound)
	}
	old := fresh()
	old.oldestMs = time.Now().Add(-time.Minute).UnixMilli()
	if d := held(consumer(bound), old); d != 0 {
		t.Fatalf("a batch already older than MaxDefer: held %v", d)
	}

	// Claimed while a batch waits: the batch goes within a few check
	// intervals, long before its minute.
	c := consumer(time.Minute)
	go func() {
		time.Sleep(500 * time.Millisecond)
		if _, err := db.Exec(ctx, `UPDATE payments SET status = 'PROCESSING', attempt = 1 WHERE id = $1`, id); err != nil {
			t.Error(err)
		}
	}()
	if d := held(c, fresh()); d <= 0 || d > 20*time.Second {
		t.Fatalf("claimed after 0.5 s: held %v", d)
	}
}

// TestYieldSurvivesASlowCheck: the overdue check may itself outlast the
// bound (a query timing out during a spike). The wait after it is then
// negative: yield must return, not wait nor count a negative time (the
// counter panics on a decrease).
func TestYieldSurvivesASlowCheck(t *testing.T) {
	const maxDefer = time.Second
	reg := prometheus.NewRegistry()
	c, err := New(Config{Brokers: kafkatest.NewCluster(t), Group: "audit", MaxDefer: maxDefer}, nil, nil, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.overdue = func(ctx context.Context, _ pgdb.DB, _ time.Duration) (bool, error) {
		time.Sleep(300 * time.Millisecond)
		return true, nil
	}
	b := (&Consumer{log: quiet}).decode([]*kgo.Record{change(1, paymentUUID(1), "PENDING")})
	// The oldest change committed almost a whole bound ago: 100 ms are left
	// when the check starts, none when it ends.
	b.oldestMs = time.Now().Add(-maxDefer + 100*time.Millisecond).UnixMilli()
	start := time.Now()
	if err := c.yield(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("held %v past the bound", d)
	}
	if got := testutil.ToFloat64(c.m.deferred); got < 0 {
		t.Fatalf("deferred seconds %v", got)
	}
}
