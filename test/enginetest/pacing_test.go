package enginetest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/payment"
)

// TestCeilingHolds paces 6,000 due payments with a cluster-wide ceiling of
// 2,000/s across two sweepers: the gateway never sees more than 2,500 in a
// wall-clock second and never has to refuse one. Unpaced (no bucket), the
// same load reached it at 4,440 and 6,000 in one second. The 25% headroom
// is for delivery jitter: charges released late in one second can arrive
// early in the next (under -race on two cores, 10% was crossed by a few
// dozen charges in some runs).
func TestCeilingHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ~4 s")
	}
	const gatewayCeiling = 2500
	c := newCluster(t, opts{sweepers: 2, executors: 2, batch: 200, ceiling: 2000,
		faults: &gatewayv1.Faults{RateCeiling: gatewayCeiling}})
	c.schedule(6000, "bob", soon())
	c.waitTerminal(60 * time.Second)
	r := c.report()
	t.Logf("max charges in one second: %d, rate limited: %d", r.GetMaxChargesPerSecond(), r.GetRateLimited())
	if r.GetMaxChargesPerSecond() > gatewayCeiling || r.GetRateLimited() != 0 || r.GetCharges() != 6000 {
		t.Fatalf("report %v", r)
	}
}

// TestOutageIsBoundedThenDrainsOldestFirst: a full outage makes the
// breaker stop claims (attempts stay bounded, rows stay PENDING); after
// recovery everything completes, oldest due first, nothing lost.
func TestOutageIsBoundedThenDrainsOldestFirst(t *testing.T) {
	c := newCluster(t, opts{executors: 2, batch: 50, faults: &gatewayv1.Faults{Outage: true},
		backoff: payment.Backoff{3 * time.Second, 3 * time.Second, 3 * time.Second}})
	now := time.Now()
	// Due times 1 ms apart, oldest first in ids.
	var ids []uuid.UUID
	for i := range 2000 {
		ids = append(ids, c.schedule(1, "bob", now.Add(-time.Duration(2000-i)*time.Millisecond+300*time.Millisecond))...)
	}
	// PAYSCHED_OUTAGE=30s runs the full-length acceptance scenario.
	outage := 3 * time.Second
	if d, err := time.ParseDuration(os.Getenv("PAYSCHED_OUTAGE")); err == nil {
		outage = d
	}
	time.Sleep(outage)
	var during int
	if err := c.db.QueryRow(context.Background(), `SELECT count(*) FROM payment_attempts`).Scan(&during); err != nil {
		t.Fatal(err)
	}
	c.setFaults(&gatewayv1.Faults{})
	c.waitTerminal(60 * time.Second)
	t.Logf("attempts during a %s outage: %d", outage, during)
	if during > 400 {
		t.Fatalf("%d attempts during the outage: the breaker did not hold", during)
	}
	r := c.report()
	if r.GetCharges() != 2000 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("report %v", r)
	}
	var dead int
	if err := c.db.QueryRow(context.Background(), `SELECT count(*) FROM payments WHERE status <> 'COMPLETED'`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Fatalf("%d payments not completed", dead)
	}
	// Oldest first: among payments first tried after recovery, the oldest
	// due were started before the newest due.
	var oldStart, newStart time.Time
	q := `SELECT max(a.started_at) FROM payment_attempts a WHERE a.attempt = 1 AND a.payment_id = ANY($1)`
	if err := c.db.QueryRow(context.Background(), q, ids[400:500]).Scan(&oldStart); err != nil {
		t.Fatal(err)
	}
	q = `SELECT min(a.started_at) FROM payment_attempts a WHERE a.attempt = 1 AND a.payment_id = ANY($1)`
	if err := c.db.QueryRow(context.Background(), q, ids[1900:]).Scan(&newStart); err != nil {
		t.Fatal(err)
	}
	if !oldStart.Before(newStart) {
		t.Fatalf("older payments (last started %s) were not drained before newer ones (first started %s)", oldStart, newStart)
	}
}
