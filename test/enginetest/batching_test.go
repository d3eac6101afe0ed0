package enginetest

import (
	"context"
	"testing"
	"time"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
)

// TestCooldownNeverDelaysTheFirstDue: after a claim that found nothing,
// the sweeper wakes when the next payment falls due, not after its claim
// cooldown. With a cooldown and an idle interval of 10 s, a payment due 2 s
// after the sweeper's first (empty) claim starts within 2 s of its due
// time; were the cooldown applied to empty claims, it would wait ~10 s.
func TestCooldownNeverDelaysTheFirstDue(t *testing.T) {
	c := newCluster(t, opts{noSweeper: true, interval: 10 * time.Second, cooldown: 10 * time.Second})
	due := time.Now().Add(2 * time.Second)
	ids := c.schedule(1, "bob", due)
	c.startSweeper("sweeper-cooldown")
	c.waitTerminal(30 * time.Second)
	var late float64
	if err := c.db.QueryRow(context.Background(), `SELECT EXTRACT(epoch FROM a.started_at - p.due_time)::float8
		FROM payments p JOIN payment_attempts a ON a.payment_id = p.id AND a.attempt = 1 WHERE p.id = $1`, ids[0]).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late > 2 {
		t.Fatalf("the first due payment started %.2f s after its due time: the empty claim's wait was not the next due time", late)
	}
}

// TestOutcomesWrittenInBatches: with --complete-wait 1 s, the outcomes of
// a batch whose charges come back over 5–30 ms share a statement (a
// statement's attempt rows share its transaction's now()), where written
// as they came they took one statement each or a few.
func TestOutcomesWrittenInBatches(t *testing.T) {
	c := newCluster(t, opts{noSweeper: true, completeWait: time.Second,
		faults: &gatewayv1.Faults{LatencyMinMs: 5, LatencyMaxMs: 30}})
	c.schedule(50, "bob", time.Now().Add(-time.Second))
	c.startSweeper("sweeper-batches")
	c.waitTerminal(60 * time.Second)
	var statements, rows int
	if err := c.db.QueryRow(context.Background(), `SELECT count(DISTINCT finished_at), count(*) FROM payment_attempts`).Scan(&statements, &rows); err != nil {
		t.Fatal(err)
	}
	if rows != 50 || statements > 3 {
		t.Fatalf("%d outcomes written in %d statements, want 50 in at most 3", rows, statements)
	}
}
