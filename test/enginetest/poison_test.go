package enginetest

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
)

// A gateway that answers with a NUL byte and invalid UTF-8 in its decline
// reasons (which no Postgres text value can hold) still has every outcome
// recorded: its strings are cleaned at the port.
func TestPoisonedGatewayStringsAreRecorded(t *testing.T) {
	c := newCluster(t, opts{faults: &gatewayv1.Faults{DeclineRate: 1, PoisonRate: 1}})
	ids := c.schedule(20, "bob", soon())
	c.waitTerminal(20 * time.Second)
	for _, id := range ids {
		if st, reason := c.status(id); st != "FAILED" {
			t.Fatalf("%s: %s %s, want FAILED", id, st, reason)
		}
		var lastErr string
		if err := c.db.QueryRow(context.Background(), `SELECT last_error FROM payments WHERE id = $1`, id).Scan(&lastErr); err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(lastErr) || strings.ContainsRune(lastErr, 0) || !strings.Contains(lastErr, "insufficient_funds") {
			t.Fatalf("last_error %q", lastErr)
		}
	}
}

// An outcome the database refuses (here a trigger refuses one payment's
// SUCCEEDED attempt, as any unstorable value would be) costs only its own
// payment: the batch is written again row by row, the others are recorded
// at once, and that one is dead-lettered OUTCOME_UNRECORDABLE, still asking
// first. Before, the whole batch came back unrecorded and waited out its
// leases, the bad row again on every claim.
func TestAnUnrecordableOutcomeCostsOnlyItself(t *testing.T) {
	// A 2-minute lease, and a wait well inside it: nothing may wait for a
	// lease to expire, and a loaded machine has time for the rest.
	// No sweeper until the payments are made and the trigger set.
	c := newCluster(t, opts{lease: 2 * time.Minute, noSweeper: true})
	ids := c.schedule(30, "bob", time.Now())
	bad := ids[7]
	refuseSuccess(t, c, bad.String())
	c.startSweeper("sweeper-0")
	c.waitTerminal(60 * time.Second)
	for _, id := range ids {
		st, reason := c.status(id)
		switch {
		case id == bad && (st != "DEAD_LETTERED" || reason != "OUTCOME_UNRECORDABLE"):
			t.Fatalf("the refused one: %s %s, want DEAD_LETTERED OUTCOME_UNRECORDABLE", st, reason)
		case id != bad && st != "COMPLETED":
			t.Fatalf("%s: %s, want COMPLETED", id, st)
		}
	}
	if !c.probeFirst(bad) {
		t.Fatal("the unrecordable one must ask first: it may have been charged")
	}
	if as := c.attempts(bad); len(as) != 1 || as[0].outcome != "AMBIGUOUS" {
		t.Fatalf("its attempts %+v, want one AMBIGUOUS", as)
	}
}

// A refused outcome alone in its flush (light load: one payment due) is
// dead-lettered OUTCOME_UNRECORDABLE too. Before, the row-by-row fallback
// ran only for batches of two or more, so a lone one came back unrecorded,
// waited out its lease, was probed, refused again: forever, one lease per
// round.
func TestALoneUnrecordableOutcomeIsDeadLettered(t *testing.T) {
	c := newCluster(t, opts{lease: 2 * time.Minute, noSweeper: true})
	ids := c.schedule(1, "bob", time.Now())
	refuseSuccess(t, c, ids[0].String())
	c.startSweeper("sweeper-0")
	c.waitTerminal(60 * time.Second)
	if st, reason := c.status(ids[0]); st != "DEAD_LETTERED" || reason != "OUTCOME_UNRECORDABLE" {
		t.Fatalf("%s %s, want DEAD_LETTERED OUTCOME_UNRECORDABLE", st, reason)
	}
	if !c.probeFirst(ids[0]) {
		t.Fatal("the unrecordable one must ask first: it may have been charged")
	}
	if as := c.attempts(ids[0]); len(as) != 1 || as[0].outcome != "AMBIGUOUS" {
		t.Fatalf("its attempts %+v, want one AMBIGUOUS", as)
	}
}

// refuseSuccess makes the database refuse the SUCCEEDED attempt of one
// payment, as it would refuse any unstorable value.
func refuseSuccess(t *testing.T, c *cluster, id string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		   IF NEW.payment_id = '` + id + `' AND NEW.outcome = 'SUCCEEDED' THEN
		     RAISE EXCEPTION 'invalid byte sequence for encoding "UTF8": 0x00' USING ERRCODE = '22021';
		   END IF;
		   RETURN NEW;
		 END $$`,
		`CREATE TRIGGER refuse_one BEFORE INSERT ON payment_attempts FOR EACH ROW EXECUTE FUNCTION refuse_one()`,
	} {
		if _, err := c.db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}
