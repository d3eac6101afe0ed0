package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

func (c *cluster) probeFirst(id uuid.UUID) bool {
	c.t.Helper()
	var pf bool
	if err := c.db.QueryRow(context.Background(), `SELECT probe_first FROM payments WHERE id = $1`, id).Scan(&pf); err != nil {
		c.t.Fatal(err)
	}
	return pf
}

// An attempt whose charge landed but whose answer was lost, and whose
// immediate probe failed too (rule 6), leaves the payment PENDING with
// probe_first: the retry asks before it charges. The gateway here has
// forgotten the key by then, so a retry that charged without asking would
// be a second charge.
func TestUncertainRetryAsksFirst(t *testing.T) {
	c := newCluster(t, opts{noReaper: true, faults: &gatewayv1.Faults{UnavailableAfterCommitRate: 1, ProbeUnavailableRate: 1, KeyRetentionMs: 1}})
	c.stop()
	id := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
	time.Sleep(100 * time.Millisecond)
	got, err := execute(t, c.execs[0], workItem(claimOne(t, c, 30*time.Second)))
	if err != nil || got[id.String()] != internalv1.Result_RESULT_RETRY {
		t.Fatalf("first attempt: %v %v", got, err)
	}
	if !c.probeFirst(id) {
		t.Fatal("probe_first is not set after an attempt that may have charged")
	}
	// The retry: the gateway answers again, and has forgotten the key.
	c.setFaults(&gatewayv1.Faults{KeyRetentionMs: 1})
	time.Sleep(100 * time.Millisecond) // past the backoff
	got, err = execute(t, c.execs[0], workItem(claimOne(t, c, 30*time.Second)))
	if err != nil || got[id.String()] != internalv1.Result_RESULT_SUCCEEDED {
		t.Fatalf("retry: %v %v, want SUCCEEDED from the probe", got, err)
	}
	if r := c.report(); r.GetCharges() != 1 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("gateway report %v: want one charge", r)
	}
}

// A probe that finds nothing but cannot prove it (an index that lags, as
// Stripe's Search does) never lets the engine charge again, clear
// probe_first, or end the payment as "not charged": each attempt stays
// ambiguous, a cancel is refused throughout, and the spent budget ends in
// AMBIGUOUS_UNRESOLVED (for the resolver), never RETRIES_EXHAUSTED. The
// gateway forgets keys at once, so one charge too many would show.
func TestAnUnprovenAbsenceIsNeverActedOn(t *testing.T) {
	c := newCluster(t, opts{noReaper: true, faults: &gatewayv1.Faults{UnavailableAfterCommitRate: 1, KeyRetentionMs: 1,
		ProbeLagMs: 60_000, ProbeUnprovenRate: 1}})
	c.stop()
	id := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
	time.Sleep(100 * time.Millisecond)
	st := store.NewStore(c.db)
	for attempt := 1; ; attempt++ {
		got, err := execute(t, c.execs[0], workItem(claimOne(t, c, 30*time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		if attempt == 1 {
			// From now on every charge would be answered: only the probes
			// stay blind.
			c.setFaults(&gatewayv1.Faults{KeyRetentionMs: 1, ProbeLagMs: 60_000, ProbeUnprovenRate: 1})
		}
		if got[id.String()] == internalv1.Result_RESULT_DEAD_LETTERED {
			break
		}
		if got[id.String()] != internalv1.Result_RESULT_RETRY || attempt > 10 {
			t.Fatalf("attempt %d: %v", attempt, got)
		}
		if !c.probeFirst(id) {
			t.Fatalf("attempt %d cleared probe_first on an unproven absence", attempt)
		}
		if p, err := st.Cancel(context.Background(), "alice", id); err == nil && p.Status == payment.Cancelled {
			t.Fatalf("attempt %d: cancel answered CANCELLED while a charge may have landed", attempt)
		}
		time.Sleep(50 * time.Millisecond) // past the backoff
	}
	if st, reason := c.status(id); st != "DEAD_LETTERED" || reason != "AMBIGUOUS_UNRESOLVED" {
		t.Fatalf("%s %s, want AMBIGUOUS_UNRESOLVED: nothing proved it was not charged", st, reason)
	}
	if r := c.report(); r.GetCharges() != 1 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("gateway report %v: want the one charge of the first attempt", r)
	}
}

// rateLimited answers every charge RESOURCE_EXHAUSTED (nothing charged)
// and every probe with absence, proven or not.
type rateLimited struct {
	gateway.Gateway
	proven bool
}

func (r rateLimited) Charge(context.Context, *gatewayv1.ChargeRequest) (*gatewayv1.Charge, error) {
	return nil, gateway.RateLimited("rate limited")
}

func (r rateLimited) GetCharge(context.Context, *gatewayv1.GetChargeRequest) (*gatewayv1.Charge, error) {
	if r.proven {
		return nil, gateway.Absent("no charge")
	}
	return nil, status.Error(codes.NotFound, "not in the index")
}

// A proven absence with a charge that is then refused (rate limited:
// nothing charged) clears probe_first; the same refusal after a probe
// that could not prove the absence does not (the issue's "cancel after a
// rate limit": a 429 after a probe that missed).
func TestOnlyAProvenAbsenceClearsProbeFirst(t *testing.T) {
	for _, c := range []struct {
		name   string
		proven bool
		want   bool
	}{
		{"proven absent, then rate limited: cleared", true, false},
		{"unproven, then nothing sent: kept", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := newCluster(t, opts{noReaper: true,
				wrapGW: func(g gateway.Gateway) gateway.Gateway { return rateLimited{Gateway: g, proven: c.proven} }})
			cl.stop()
			id := cl.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
			time.Sleep(100 * time.Millisecond)
			// As the reaper leaves an expired claim: it may have charged.
			if _, err := cl.db.Exec(context.Background(), `UPDATE payments SET probe_first = true WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			got, err := execute(t, cl.execs[0], workItem(claimOne(t, cl, 30*time.Second)))
			if err != nil || got[id.String()] != internalv1.Result_RESULT_RETRY {
				t.Fatalf("outcome %v %v", got, err)
			}
			if pf := cl.probeFirst(id); pf != c.want {
				t.Fatalf("probe_first %v, want %v", pf, c.want)
			}
		})
	}
}

// A re-drive (operator) and a resolver's requeue move a dead letter back
// to PENDING with probe_first, whatever the mover saw: a charge may land
// between its look and the next claim (a request still in flight). Here
// one lands right after the move, the gateway forgetting the key at once:
// only the probe keeps the engine from charging a second time. No sweeper
// runs: the move makes the payment due at once, and the test, not a race
// with a sweeper, decides that the late charge comes before the claim.
func TestMovesBackToPendingAskFirst(t *testing.T) {
	for _, by := range []payment.Actor{payment.Operator, payment.Resolver} {
		t.Run(string(by), func(t *testing.T) {
			c := newCluster(t, opts{noReaper: true, faults: &gatewayv1.Faults{KeyRetentionMs: 1}})
			c.stop() // the test claims by hand
			id := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
			deadLetter(t, c, id)
			if _, err := c.db.Exec(context.Background(), `UPDATE payments SET probe_first = false WHERE id = $1`, id); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Apply(context.Background(), c.db, store.OutOfBandMove{ID: id, By: by, To: payment.Pending, Redrive: true,
				Actor: "test", Action: "REDRIVE", Reason: "test"}); err != nil {
				t.Fatal(err)
			}
			if !c.probeFirst(id) {
				t.Fatal("the move back to PENDING did not set probe_first")
			}
			// The late charge, before the next claim.
			if _, err := c.sim.Charge(context.Background(), &gatewayv1.ChargeRequest{IdempotencyKey: id.String(), Reference: id.String(),
				Amount: 100, Currency: "USD", Payer: "alice", Payee: "bob"}); err != nil {
				t.Fatal(err)
			}
			got, err := execute(t, c.execs[0], workItem(claimOne(t, c, 30*time.Second)))
			if err != nil || got[id.String()] != internalv1.Result_RESULT_SUCCEEDED {
				t.Fatalf("outcome %v %v", got, err)
			}
			if st, _ := c.status(id); st != "COMPLETED" {
				t.Fatalf("status %s", st)
			}
			if r := c.report(); r.GetSucceeded() != 1 || len(r.GetDoubleCharged()) != 0 {
				t.Fatalf("gateway report %v: charged twice", r)
			}
		})
	}
}
