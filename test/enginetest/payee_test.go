package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
)

// A payee over the executor's --payee-rate waits without holding a lease:
// its payments go back to PENDING with run_at at their turn, spread at the
// rate, and are charged then, once each; payments to other payees are not
// held behind it, and no pacing counts towards LEASE_TOO_SHORT.
func TestPayeeRateSpreadsOnePayeesCharges(t *testing.T) {
	c := newCluster(t, opts{payeeRate: 4, lease: 10 * time.Second})
	due := soon()
	var hot []uuid.UUID
	for range 9 {
		hot = append(hot, c.schedule(1, "hot-account", due)...)
	}
	cold := c.schedule(20, "cold-", due)
	c.waitTerminal(60 * time.Second)
	for _, id := range append(append([]uuid.UUID{}, hot...), cold...) {
		if st, reason := c.status(id); st != "COMPLETED" {
			t.Fatalf("%s is %s %s, want COMPLETED", id, st, reason)
		}
	}
	if r := c.report(); r.GetCharges() != 29 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("report %v: 29 charges, none twice", r)
	}
	ctx := context.Background()
	// One executor at 4/s with a burst of 1: nine charges of one payee
	// take at least 2 s from the first to the last.
	var span float64
	if err := c.db.QueryRow(ctx, `SELECT extract(epoch FROM max(a.started_at) - min(a.started_at)) FROM payment_attempts a
		WHERE a.payment_id = ANY($1) AND a.outcome = 'SUCCEEDED'`, hot).Scan(&span); err != nil {
		t.Fatal(err)
	}
	if span < 1.9 {
		t.Fatalf("the hot payee's 9 charges took %.2fs from first to last; at 4/s they need at least 2s", span)
	}
	var pushed, coldPushed, releases int
	if err := c.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE run_at > due_time AND id = ANY($1)),
		count(*) FILTER (WHERE run_at > due_time AND id = ANY($2)), coalesce(sum(releases), 0)
		FROM payments WHERE id = ANY($1) OR id = ANY($2)`, hot, cold).Scan(&pushed, &coldPushed, &releases); err != nil {
		t.Fatal(err)
	}
	if pushed == 0 || coldPushed != 0 || releases != 0 {
		t.Fatalf("run_at moved for %d hot and %d cold payments, releases %d: only the hot payee's wait, and pacing is no release",
			pushed, coldPushed, releases)
	}
}
