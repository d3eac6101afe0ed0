package enginetest

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// execute calls executor addr directly with items and collects the outcomes.
func execute(t *testing.T, addr string, items ...*internalv1.WorkItem) (map[string]internalv1.Result, error) {
	t.Helper()
	st, err := internalv1.NewExecutorServiceClient(dial(t, addr)).Execute(context.Background(),
		&internalv1.ExecuteRequest{SweeperId: "test", Items: items})
	got := map[string]internalv1.Result{}
	for err == nil {
		var msg *internalv1.ExecuteResponse
		if msg, err = st.Recv(); err == nil {
			for _, o := range msg.GetOutcomes() {
				got[o.GetPaymentId()] = o.GetResult()
			}
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return got, err
}

// Money rule 1: the executor charges what the row holds for the claimed
// attempt. A request for a payment that is not claimed at that attempt
// (forged, or stale) charges nothing, and the request carries no amount,
// payer or payee to forge.
func TestExecutorChargesTheRowsValues(t *testing.T) {
	c := newCluster(t, opts{sweepers: 0, noReaper: true})
	c.stop()
	ctx := context.Background()
	ids := c.schedule(3, "bob", time.Now().Add(50*time.Millisecond))
	time.Sleep(100 * time.Millisecond)
	claimed, err := store.Claim(ctx, c.db, "sweeper-t", time.Minute, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", err, claimed)
	}
	item := func(id uuid.UUID, due time.Time, attempt int32) *internalv1.WorkItem {
		return &internalv1.WorkItem{PaymentId: id.String(), DueTime: timestamppb.New(due), Attempt: attempt}
	}
	var unclaimed uuid.UUID
	for _, id := range ids {
		if id != claimed[0].ID {
			unclaimed = id
			break
		}
	}
	// A token that is not the claim's (stale or forged) charges nothing.
	got, err := execute(t, c.execs[0], item(claimed[0].ID, claimed[0].DueTime, claimed[0].Attempt+7))
	if err != nil || got[claimed[0].ID.String()] != internalv1.Result_RESULT_FENCED {
		t.Fatalf("stale token: %v %v", got, err)
	}
	// A payment twice in one batch is refused whole.
	if _, err := execute(t, c.execs[0], item(unclaimed, claimed[0].DueTime, 1), item(unclaimed, claimed[0].DueTime, 1)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("duplicate items: %v, want INVALID_ARGUMENT", err)
	}
	got, err = execute(t, c.execs[0],
		item(claimed[0].ID, claimed[0].DueTime, claimed[0].Attempt), // the real claim
		item(unclaimed, claimed[0].DueTime, 1))                      // forged: PENDING, never claimed
	if err != nil {
		t.Fatal(err)
	}
	if got[claimed[0].ID.String()] != internalv1.Result_RESULT_SUCCEEDED || got[unclaimed.String()] != internalv1.Result_RESULT_FENCED {
		t.Fatalf("outcomes %v", got)
	}
	r := c.report()
	if r.GetCharges() != 1 {
		t.Fatalf("charges %d, want only the claimed one", r.GetCharges())
	}
	probe, err := c.sim.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: claimed[0].ID.String()})
	if err != nil {
		t.Fatal(err)
	}
	var payer, payee, currency string
	var amount int64
	if err := c.db.QueryRow(ctx, `SELECT payer, payee, amount_minor, currency FROM payments WHERE id = $1`, claimed[0].ID).
		Scan(&payer, &payee, &amount, &currency); err != nil {
		t.Fatal(err)
	}
	ch := probe.GetCharge()
	if ch.GetPayer() != payer || ch.GetPayee() != payee || ch.GetAmount() != amount || ch.GetCurrency() != currency {
		t.Fatalf("charged %s→%s %d %s; the row holds %s→%s %d %s", ch.GetPayer(), ch.GetPayee(), ch.GetAmount(), ch.GetCurrency(),
			payer, payee, amount, currency)
	}
}

// discardStream is an Execute stream whose client went away.
type discardStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (d discardStream) Send(*internalv1.ExecuteResponse) error {
	return status.Error(codes.Canceled, "client gone")
}
func (d discardStream) Context() context.Context { return d.ctx }

// SendHeader: the header is lost with the client.
func (d discardStream) SendHeader(metadata.MD) error { return nil }

// cutAfterSend runs the real executor but answers the sweeper with a
// transport error at once, as a connection dropped after the request was
// sent: the executor works on while the sweeper sees a failure.
type cutAfterSend struct {
	internalv1.UnimplementedExecutorServiceServer
	real internalv1.ExecutorServiceServer
	wg   sync.WaitGroup
}

func (x *cutAfterSend) Execute(req *internalv1.ExecuteRequest, stream internalv1.ExecutorService_ExecuteServer) error {
	if len(req.GetItems()) == 0 {
		return x.real.Execute(req, stream) // a sweeper's hello
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		_ = x.real.Execute(req, discardStream{ctx: context.WithoutCancel(stream.Context())})
	}()
	return status.Error(codes.Unavailable, "connection reset")
}

// Money rule 2: the sweeper sees a transport error while the executor is
// charging. A cancel racing that must never answer "cancelled" for a
// payment that is or will be charged: the sweeper must not release a claim
// it cannot prove untouched, and cancel must refuse a payment an attempt
// may have reached the gateway for.
func TestCancelNeverWinsAgainstALandingCharge(t *testing.T) {
	x := &cutAfterSend{}
	c := newCluster(t, opts{lease: 2 * time.Second, chargeTO: 500 * time.Millisecond, probeTO: 300 * time.Millisecond, batch: 20,
		faults: &gatewayv1.Faults{LatencyMinMs: 30, LatencyMaxMs: 120},
		wrapExec: func(_ int, real internalv1.ExecutorServiceServer) internalv1.ExecutorServiceServer {
			x.real = real
			return x
		}})
	ids := c.schedule(60, "bob", soon())
	st := store.NewStore(c.db)
	cancelled := map[uuid.UUID]bool{}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for _, id := range ids {
			if cancelled[id] {
				continue
			}
			p, err := st.Cancel(context.Background(), "alice", id)
			if err == nil && p.Status == payment.Cancelled {
				cancelled[id] = true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	x.wg.Wait()
	for id := range cancelled {
		if _, err := c.sim.GetCharge(context.Background(), &gatewayv1.GetChargeRequest{IdempotencyKey: id.String()}); status.Code(err) != codes.NotFound {
			t.Errorf("%s: cancel answered CANCELLED, but the gateway charged it (probe: %v)", id, err)
		}
	}
}

// Money rule 3: a payment an earlier attempt may have charged is probed,
// and when its budget is spent meanwhile it is settled by the gateway's
// answer, never dead-lettered as RETRIES_EXHAUSTED while it may be charged.
func TestSpentBudgetAfterAnAbandonedAttemptAsksFirst(t *testing.T) {
	c := newCluster(t, opts{faults: &gatewayv1.Faults{KeyRetentionMs: 1}})
	c.stop()
	ctx := context.Background()
	charged := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
	unknown := c.schedule(1, "carol", time.Now().Add(50*time.Millisecond))[0]
	if _, err := c.sim.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: charged.String(), Reference: charged.String(),
		Amount: 100, Currency: "USD", Payer: "alice", Payee: "bob"}); err != nil {
		t.Fatal(err)
	}
	// As the reaper leaves a payment whose last lease expired with the budget spent.
	if _, err := c.db.Exec(ctx, `UPDATE payments SET retries = 9, probe_first = true, attempt = 4`); err != nil {
		t.Fatal(err)
	}
	c.startSweeper("sweeper-x")
	c.waitTerminal(10 * time.Second)
	if st, _ := c.status(charged); st != "COMPLETED" {
		t.Fatalf("charged payment: %s, want COMPLETED (the probe found the charge)", st)
	}
	if st, reason := c.status(unknown); st != "DEAD_LETTERED" || reason != "RETRIES_EXHAUSTED" {
		t.Fatalf("uncharged payment: %s %s, want RETRIES_EXHAUSTED after the gateway said it holds no charge", st, reason)
	}
	if r := c.report(); r.GetCharges() != 1 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("report %v", r)
	}
}
