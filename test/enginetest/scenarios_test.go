package enginetest

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

func soon() time.Time { return time.Now().Add(200 * time.Millisecond) }

func TestHappyPathChargesOnce(t *testing.T) {
	c := newCluster(t, opts{executors: 2})
	ids := c.schedule(50, "bob", soon())
	c.waitTerminal(20 * time.Second)
	for _, id := range ids {
		if st, _ := c.status(id); st != "COMPLETED" {
			t.Fatalf("%s: %s", id, st)
		}
	}
	if r := c.report(); r.GetCharges() != 50 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("report %v", r)
	}
}

// The charge is recorded but its answer lost; the probe says SUCCEEDED.
func TestLostAnswerSettledByProbe(t *testing.T) {
	c := newCluster(t, opts{faults: &gatewayv1.Faults{TimeoutAfterCommitRate: 1}})
	id := c.schedule(1, "bob", soon())[0]
	c.waitTerminal(20 * time.Second)
	if st, _ := c.status(id); st != "COMPLETED" {
		t.Fatalf("status %s", st)
	}
	as := c.attempts(id)
	if len(as) != 1 || as[0].outcome != "SUCCEEDED" {
		t.Fatalf("attempts %+v", as)
	}
	if r := c.report(); r.GetCharges() != 1 {
		t.Fatalf("charges %d, want 1", r.GetCharges())
	}
}

// The charge times out before the gateway records it; the probe says
// NOT_FOUND; the retry uses the same key and charges once.
func TestNotFoundRetriesWithSameKey(t *testing.T) {
	c := newCluster(t, opts{faults: &gatewayv1.Faults{LatencyMinMs: 400, LatencyMaxMs: 400}, chargeTO: 100 * time.Millisecond,
		backoff: []time.Duration{500 * time.Millisecond, 500 * time.Millisecond}})
	id := c.schedule(1, "bob", soon())[0]
	deadline := time.Now().Add(10 * time.Second)
	for len(c.attempts(id)) == 0 || c.attempts(id)[0].outcome == "" {
		if time.Now().After(deadline) {
			t.Fatal("first attempt never finished")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.setFaults(&gatewayv1.Faults{})
	c.waitTerminal(20 * time.Second)
	as := c.attempts(id)
	if st, _ := c.status(id); st != "COMPLETED" || len(as) != 2 {
		t.Fatalf("status %s attempts %+v", st, as)
	}
	if as[0].outcome != "RETRYABLE" || !strings.Contains(as[0].err, "not charged") || as[1].outcome != "SUCCEEDED" {
		t.Fatalf("attempts %+v", as)
	}
	if as[0].key != id.String() || as[1].key != id.String() {
		t.Fatalf("keys %q %q, want the payment id", as[0].key, as[1].key)
	}
	if r := c.report(); r.GetCharges() != 1 {
		t.Fatalf("charges %d", r.GetCharges())
	}
}

func TestDeclineFailsWithoutRetry(t *testing.T) {
	c := newCluster(t, opts{})
	id := c.schedule(1, "decline-mallory", soon())[0]
	c.waitTerminal(20 * time.Second)
	time.Sleep(300 * time.Millisecond) // a retry would have happened by now
	if st, _ := c.status(id); st != "FAILED" {
		t.Fatalf("status %s", st)
	}
	if as := c.attempts(id); len(as) != 1 || as[0].outcome != "DECLINED" {
		t.Fatalf("attempts %+v", as)
	}
}

// An outage longer than the budget: every call answers UNAVAILABLE, which
// gRPC also answers when a connection drops after the request was sent, and
// the probes go unanswered too. The gateway may have charged, so the dead
// letter is AMBIGUOUS_UNRESOLVED (the resolver keeps asking), never
// RETRIES_EXHAUSTED.
func TestOutageLongerThanBudgetDeadLetters(t *testing.T) {
	c := newCluster(t, opts{faults: &gatewayv1.Faults{Outage: true}})
	id := c.schedule(1, "bob", soon())[0]
	c.waitTerminal(20 * time.Second)
	st, reason := c.status(id)
	if st != "DEAD_LETTERED" || reason != "AMBIGUOUS_UNRESOLVED" {
		t.Fatalf("status %s reason %s", st, reason)
	}
	if as := c.attempts(id); len(as) != 4 { // 1 + 3 retries
		t.Fatalf("attempts %+v", as)
	}
	if r := c.report(); r.GetCharges() != 0 {
		t.Fatalf("charges %d", r.GetCharges())
	}
}

// crashOnce charges like an executor the first time (with the row's
// values), then "dies" before recording anything; later batches go to the
// real executor.
type crashOnce struct {
	internalv1.UnimplementedExecutorServiceServer
	real    internalv1.ExecutorServiceServer
	c       *cluster
	crashed atomic.Bool
}

func (x *crashOnce) Execute(req *internalv1.ExecuteRequest, stream internalv1.ExecutorService_ExecuteServer) error {
	if len(req.GetItems()) == 0 || x.crashed.Swap(true) { // a sweeper's hello, or after the crash
		return x.real.Execute(req, stream)
	}
	ctx := stream.Context()
	var items []store.ClaimRef
	for _, w := range req.GetItems() {
		items = append(items, store.ClaimRef{ID: uuid.MustParse(w.GetPaymentId()), DueTime: w.GetDueTime().AsTime(), Attempt: w.GetAttempt()})
	}
	works, err := store.LoadClaimed(ctx, x.c.db, items)
	if err != nil {
		return err
	}
	gw := gatewayv1.NewGatewayServiceClient(dial(x.c.t, x.c.simAddr))
	for _, w := range works {
		if _, err := gw.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: w.ID.String(), Amount: w.Amount,
			Currency: w.Currency, Payer: w.Payer, Payee: w.Payee, Reference: w.ID.String()}); err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, "executor killed")
}

// The executor charges, then dies before recording: the lease expires, the
// reaper sets probe_first, and the next attempt asks the gateway before
// charging. The gateway here forgets keys at once (a PSP forgets them
// after a while: Stripe after 24 h), so a re-charge without that probe
// would be a second charge.
func TestExecutorKilledAfterCharge(t *testing.T) {
	x := &crashOnce{}
	c := newCluster(t, opts{lease: 3 * time.Second, chargeTO: 300 * time.Millisecond, probeTO: 300 * time.Millisecond,
		faults: &gatewayv1.Faults{KeyRetentionMs: 1},
		wrapExec: func(_ int, real internalv1.ExecutorServiceServer) internalv1.ExecutorServiceServer {
			x.real = real
			return x
		}})
	x.c = c
	id := c.schedule(1, "bob", soon())[0]
	c.waitTerminal(20 * time.Second)
	if st, _ := c.status(id); st != "COMPLETED" {
		t.Fatalf("status %s", st)
	}
	as := c.attempts(id)
	if len(as) != 2 || as[0].outcome != "ABANDONED" || as[1].outcome != "SUCCEEDED" || as[0].key != as[1].key {
		t.Fatalf("attempts %+v", as)
	}
	if r := c.report(); r.GetCharges() != 1 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("report %v", r)
	}
}

// A zombie executor's outcome for an attempt that is no longer current
// changes nothing but its own attempt row.
func TestZombieWriteIsFenced(t *testing.T) {
	c := newCluster(t, opts{sweepers: 0, noReaper: true})
	c.stop() // no background sweeping: this test drives the claim itself
	ctx := context.Background()
	id := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
	time.Sleep(100 * time.Millisecond)
	first, err := store.Claim(ctx, c.db, "sweeper-a", time.Millisecond, 10)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %v", err, first)
	}
	it := store.ClaimRef{ID: id, DueTime: first[0].DueTime, Attempt: first[0].Attempt}
	// The lease runs out; the row goes back to PENDING and is claimed again.
	time.Sleep(10 * time.Millisecond)
	if _, err := c.db.Exec(ctx, `UPDATE payments SET status = 'PENDING', lease_until = NULL WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	second, err := store.Claim(ctx, c.db, "sweeper-b", time.Minute, 10)
	if err != nil || len(second) != 1 || second[0].Attempt != first[0].Attempt+1 {
		t.Fatalf("reclaim: %v %v", err, second)
	}
	applied, err := store.Complete(ctx, c.db, "zombie", []store.Transition{{ClaimRef: it, Outcome: payment.Succeeded, Ref: "ch_zombie", Status: payment.Completed}})
	if err != nil || len(applied) != 0 {
		t.Fatalf("zombie write applied=%v err=%v, want none", applied, err)
	}
	var st, ref string
	var att int32
	if err := c.db.QueryRow(ctx, `SELECT status, COALESCE(gateway_ref, ''), attempt FROM payments WHERE id = $1`, id).Scan(&st, &ref, &att); err != nil {
		t.Fatal(err)
	}
	if st != "PROCESSING" || ref != "" || att != second[0].Attempt {
		t.Fatalf("payment changed by the zombie: %s %q attempt %d", st, ref, att)
	}
	if as := c.attempts(id); len(as) != 1 || as[0].outcome != "SUCCEEDED" {
		t.Fatalf("the zombie's own attempt row should record what it saw: %+v", as)
	}
}

// A sweeper stopped mid-run (SIGTERM) loses nothing: it waits for the
// batches in flight, whose outcomes are recorded, so it holds no claim when
// it exits, and another sweeper completes the rest with one charge each.
func TestSweeperShutdownLosesNothing(t *testing.T) {
	c := newCluster(t, opts{sweepers: 0, executors: 2, batch: 50, faults: &gatewayv1.Faults{LatencyMinMs: 20, LatencyMaxMs: 40}})
	c.stop()
	ids := c.schedule(600, "bob", soon())
	time.Sleep(300 * time.Millisecond)
	stop := c.startSweeper("sweeper-doomed")
	time.Sleep(300 * time.Millisecond)
	stop()
	var held int
	if err := c.db.QueryRow(context.Background(),
		`SELECT count(*) FROM payments WHERE lease_owner = 'sweeper-doomed'`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d claims still held by the stopped sweeper", held)
	}
	c.startSweeper("sweeper-next")
	c.waitTerminal(30 * time.Second)
	r := c.report()
	if r.GetCharges() != int64(len(ids)) || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("report %v", r)
	}
}

// Two sweepers and three executors on 5,000 due payments: each charged
// once, each attempted once (never in two executors at once).
func TestContention(t *testing.T) {
	c := newCluster(t, opts{sweepers: 2, executors: 3, batch: 200})
	ids := c.schedule(5000, "bob", soon())
	c.waitTerminal(60 * time.Second)
	r := c.report()
	if r.GetCharges() != int64(len(ids)) || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("report charges=%d doubles=%v", r.GetCharges(), r.GetDoubleCharged())
	}
	var completed, multi int
	if err := c.db.QueryRow(context.Background(), `SELECT count(*) FROM payments WHERE status = 'COMPLETED'`).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if err := c.db.QueryRow(context.Background(),
		`SELECT count(*) FROM (SELECT payment_id FROM payment_attempts GROUP BY 1 HAVING count(*) > 1) m`).Scan(&multi); err != nil {
		t.Fatal(err)
	}
	if completed != len(ids) || multi != 0 {
		rows, _ := c.db.Query(context.Background(), `SELECT payment_id::text, attempt, outcome, coalesce(error, ''), executor_id,
			started_at, finished_at FROM payment_attempts WHERE payment_id IN
			(SELECT payment_id FROM payment_attempts GROUP BY 1 HAVING count(*) > 1) ORDER BY 1, 2 LIMIT 20`)
		for rows.Next() {
			v, _ := rows.Values()
			t.Logf("attempt %v", v)
		}
		rows.Close()
		t.Fatalf("completed=%d payments with several attempts=%d", completed, multi)
	}
}
