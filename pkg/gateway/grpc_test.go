package gateway_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
)

// streamServer answers Charges items through decide, or by default with a
// charge made of the request; Charge (unary) is counted.
type streamServer struct {
	gatewayv1.UnimplementedGatewayServiceServer
	noStream bool
	// decide answers an item; nil result: no answer (the item is dropped).
	decide func(it *gatewayv1.ChargeItem) *gatewayv1.ChargeResult
	// cut, when set, breaks a stream at its cut-th item, unanswered.
	cut    atomic.Int32
	unary  atomic.Int32
	recvd  atomic.Int64
	opened atomic.Int32
}

func chargeOf(r *gatewayv1.ChargeRequest) *gatewayv1.Charge {
	return &gatewayv1.Charge{ChargeId: "ch_" + r.GetIdempotencyKey(), IdempotencyKey: r.GetIdempotencyKey(), Reference: r.GetReference(),
		Amount: r.GetAmount(), Currency: r.GetCurrency(), Status: gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED}
}

func (s *streamServer) Charge(_ context.Context, r *gatewayv1.ChargeRequest) (*gatewayv1.ChargeResponse, error) {
	s.unary.Add(1)
	return &gatewayv1.ChargeResponse{Charge: chargeOf(r)}, nil
}

func (s *streamServer) Charges(st gatewayv1.GatewayService_ChargesServer) error {
	if s.noStream {
		return status.Error(codes.Unimplemented, "no Charges here")
	}
	s.opened.Add(1)
	got := 0
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		out := &gatewayv1.ChargesResponse{}
		s.recvd.Add(int64(len(req.GetItems())))
		for _, it := range req.GetItems() {
			got++
			if c := int(s.cut.Load()); c > 0 && got >= c {
				return status.Error(codes.Unavailable, "connection reset")
			}
			r := &gatewayv1.ChargeResult{Tag: it.GetTag(), Charge: chargeOf(it.GetRequest())}
			if s.decide != nil {
				r = s.decide(it)
			}
			if r != nil {
				out.Results = append(out.Results, r)
			}
		}
		if err := st.Send(out); err != nil {
			return err
		}
	}
}

func startGateway(t *testing.T, srv gatewayv1.GatewayServiceServer) *gateway.GRPC {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	g := gateway.NewGRPC(cc)
	t.Cleanup(g.Close)
	return g
}

func req(key string) *gatewayv1.ChargeRequest {
	return &gatewayv1.ChargeRequest{IdempotencyKey: key, Reference: key, Amount: 100, Currency: "EUR", Payer: "a", Payee: "b"}
}

// Many callers share one stream, and each gets its own answer, even when
// answers come back out of order and several to a message.
func TestChargesShareOneStream(t *testing.T) {
	srv := &streamServer{}
	g := startGateway(t, srv)
	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("pay-%d", i)
			ch, err := g.Charge(context.Background(), req(key))
			if err == nil && ch.GetIdempotencyKey() != key {
				err = fmt.Errorf("%s answered with %s's charge", key, ch.GetIdempotencyKey())
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if srv.opened.Load() != 1 || srv.unary.Load() != 0 {
		t.Fatalf("streams opened %d, unary calls %d; want one stream and no unary call", srv.opened.Load(), srv.unary.Load())
	}
}

// Each item's error comes back as that item's status; a stream that breaks
// with an item in flight answers it UNAVAILABLE (read as ambiguous), and
// the next charge opens a new stream.
func TestChargeStreamErrorsAndLoss(t *testing.T) {
	srv := &streamServer{decide: func(it *gatewayv1.ChargeItem) *gatewayv1.ChargeResult {
		if it.GetRequest().GetIdempotencyKey() == "conflict" {
			return &gatewayv1.ChargeResult{Tag: it.GetTag(), Code: int32(codes.FailedPrecondition), Message: "key reused"}
		}
		return &gatewayv1.ChargeResult{Tag: it.GetTag(), Charge: chargeOf(it.GetRequest())}
	}}
	g := startGateway(t, srv)
	ctx := context.Background()
	if _, err := g.Charge(ctx, req("conflict")); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("conflict: %v, want FAILED_PRECONDITION", err)
	}
	srv.cut.Store(2) // the open stream breaks at its second item
	if _, err := g.Charge(ctx, req("lost")); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream lost with the item in flight: %v, want UNAVAILABLE", err)
	}
	srv.cut.Store(0)
	if ch, err := g.Charge(ctx, req("after")); err != nil || ch.GetIdempotencyKey() != "after" {
		t.Fatalf("charge after a lost stream: %v %v", ch, err)
	}
	if srv.opened.Load() != 2 {
		t.Fatalf("streams opened %d, want 2", srv.opened.Load())
	}
}

// A caller whose deadline passes gets DEADLINE_EXCEEDED (ambiguous); the
// late answer goes nowhere and other callers are unaffected.
func TestChargeDeadlineOnTheStream(t *testing.T) {
	release := make(chan struct{})
	srv := &streamServer{decide: func(it *gatewayv1.ChargeItem) *gatewayv1.ChargeResult {
		if it.GetRequest().GetIdempotencyKey() == "slow" {
			if it.GetTimeoutMs() == 0 || it.GetTimeoutMs() > 200 {
				panic(fmt.Sprintf("item timeout %d ms, want the caller's 200 ms or less", it.GetTimeoutMs()))
			}
			<-release
		}
		return &gatewayv1.ChargeResult{Tag: it.GetTag(), Charge: chargeOf(it.GetRequest())}
	}}
	g := startGateway(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := g.Charge(ctx, req("slow")); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("slow: %v, want DEADLINE_EXCEEDED", err)
	}
	close(release)
	if ch, err := g.Charge(context.Background(), req("next")); err != nil || ch.GetIdempotencyKey() != "next" {
		t.Fatalf("next: %v %v", ch, err)
	}
}

// A gateway without Charges is called with Charge, and nothing is lost on
// the way.
func TestChargeWithoutStreamsFallsBackToUnary(t *testing.T) {
	srv := &streamServer{noStream: true}
	g := startGateway(t, srv)
	for i := range 3 {
		if ch, err := g.Charge(context.Background(), req(fmt.Sprint("k", i))); err != nil || ch.GetIdempotencyKey() != fmt.Sprint("k", i) {
			t.Fatalf("charge %d: %v %v", i, ch, err)
		}
	}
	if srv.unary.Load() != 3 {
		t.Fatalf("unary calls %d, want 3", srv.unary.Load())
	}
}

// Under load (many callers, each charging again as soon as it has its
// answer) every charge reaches the gateway and is answered: none is lost
// between callers queueing and the stream's sender. A sender that reused
// its buffer once lost a sixth of them.
func TestChargesUnderLoadAreAllAnswered(t *testing.T) {
	srv := &streamServer{}
	g := startGateway(t, srv)
	const callers, each = 192, 200
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if _, err := g.Charge(ctx, req(fmt.Sprint(w, "-", i))); err != nil {
					failed.Add(1)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || srv.recvd.Load() != callers*each {
		t.Fatalf("%d charges failed; the gateway received %d of %d", failed.Load(), srv.recvd.Load(), callers*each)
	}
}
