package gatewaysim_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/test/pgtest"
	"github.com/paysched/paysched/tools/gatewaysim"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func ledgers(t *testing.T) map[string]func() gatewaysim.Ledger {
	return map[string]func() gatewaysim.Ledger{
		"memory": func() gatewaysim.Ledger { return gatewaysim.NewMemLedger() },
		"postgres": func() gatewaysim.Ledger {
			l, err := gatewaysim.NewPGLedger(context.Background(), pgtest.NewPool(t))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
}

// serve runs s's GatewayService on a loopback port for the test and
// returns a connection to it.
func serve(t *testing.T, s *gatewaysim.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, s)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func charge(key string, amount int64) *gatewayv1.ChargeRequest {
	return &gatewayv1.ChargeRequest{IdempotencyKey: key, Amount: amount, Currency: "USD", Payer: "a", Payee: "b", Reference: key}
}

func TestIdempotencyIsExact(t *testing.T) {
	for name, mk := range ledgers(t) {
		t.Run(name, func(t *testing.T) {
			s := gatewaysim.New(mk(), nil)
			// Charges made yesterday at noon: the day listed below is theirs
			// whatever the hour.
			y, m, d := time.Now().UTC().AddDate(0, 0, -1).Date()
			noon := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
			s.Now = func() time.Time { return noon }
			ctx := context.Background()
			// 50 concurrent calls with one key: one charge, the same answer.
			var wg sync.WaitGroup
			got := make([]*gatewayv1.ChargeResponse, 50)
			errs := make([]error, 50)
			for i := range got {
				wg.Add(1)
				go func() { defer wg.Done(); got[i], errs[i] = s.Charge(ctx, charge("k1", 100)) }()
			}
			wg.Wait()
			for i := range got {
				if errs[i] != nil || !proto.Equal(got[i].GetCharge(), got[0].GetCharge()) {
					t.Fatalf("call %d: %v %v", i, errs[i], got[i])
				}
			}
			if _, err := s.Charge(ctx, charge("k1", 101)); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("same key, other amount: %v", err)
			}
			g, err := s.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: "k1"})
			if err != nil || g.GetCharge().GetChargeId() != got[0].GetCharge().GetChargeId() {
				t.Fatalf("get: %v %v", err, g)
			}
			if _, err := s.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: "nope"}); status.Code(err) != codes.NotFound {
				t.Fatalf("unknown key: %v", err)
			}
			r, err := s.Report(ctx, &gatewayv1.ReportRequest{})
			if err != nil || r.GetCharges() != 1 || len(r.GetDoubleCharged()) != 0 {
				t.Fatalf("report %v %v", r, err)
			}
			// Two keys for one reference is what the report exists to catch.
			second := charge("k2", 100)
			second.Reference = "k1"
			if _, err := s.Charge(ctx, second); err != nil {
				t.Fatal(err)
			}
			r, _ = s.Report(ctx, &gatewayv1.ReportRequest{})
			if len(r.GetDoubleCharged()) != 1 || r.GetDoubleCharged()[0] != "k1" {
				t.Fatalf("double charge not reported: %v", r)
			}
			day := noon.Format(time.DateOnly)
			page, err := s.ListSettlements(ctx, &gatewayv1.ListSettlementsRequest{Day: day, PageSize: 1})
			if err != nil || len(page.GetCharges()) != 1 || page.GetNextPageToken() == "" {
				t.Fatalf("settlements page 1: %v %v", err, page)
			}
			page, err = s.ListSettlements(ctx, &gatewayv1.ListSettlementsRequest{Day: day, PageSize: 1, PageToken: page.GetNextPageToken()})
			if err != nil || len(page.GetCharges()) != 1 || page.GetNextPageToken() != "" {
				t.Fatalf("settlements page 2: %v %v", err, page)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	s := gatewaysim.New(gatewaysim.NewMemLedger(), nil)
	ctx := context.Background()
	set := func(f *gatewayv1.Faults) {
		if _, err := s.SetFaults(ctx, &gatewayv1.SetFaultsRequest{Faults: f}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Charge(ctx, charge("d", 1))
	if err != nil || r.GetCharge().GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED {
		t.Fatal(err, r)
	}
	dec := charge("decline-1", 1)
	dec.Payee = "decline-bob"
	if r, err := s.Charge(ctx, dec); err != nil || r.GetCharge().GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED {
		t.Fatalf("decline by rule: %v %v", err, r)
	}
	set(&gatewayv1.Faults{Outage: true})
	if _, err := s.Charge(ctx, charge("o", 1)); status.Code(err) != codes.Unavailable {
		t.Fatalf("outage: %v", err)
	}
	set(&gatewayv1.Faults{UnavailableRate: 1})
	if _, err := s.Charge(ctx, charge("u", 1)); status.Code(err) != codes.Unavailable {
		t.Fatalf("unavailable: %v", err)
	}
	set(&gatewayv1.Faults{TimeoutAfterCommitRate: 1})
	if _, err := s.Charge(ctx, charge("t", 1)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("timeout after commit: %v", err)
	}
	if _, err := s.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: "t"}); err != nil {
		t.Fatalf("the lost answer's charge must exist: %v", err)
	}
	set(&gatewayv1.Faults{DeclineRate: 1})
	if r, _ := s.Charge(ctx, charge("r", 1)); r.GetCharge().GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED {
		t.Fatal("decline rate 1 did not decline")
	}
	set(&gatewayv1.Faults{RateCeiling: 5})
	exhausted := 0
	for i := range 10 {
		if _, err := s.Charge(ctx, charge(fmt.Sprint("c", i), 1)); status.Code(err) == codes.ResourceExhausted {
			exhausted++
		}
	}
	if exhausted == 0 {
		t.Fatal("the rate ceiling never refused")
	}
	set(&gatewayv1.Faults{LatencyMinMs: 30, LatencyMaxMs: 30})
	t0 := time.Now()
	_, _ = s.Charge(ctx, charge("l", 1))
	if time.Since(t0) < 30*time.Millisecond {
		t.Fatal("latency not applied")
	}
	f, _ := s.GetFaults(ctx, &gatewayv1.GetFaultsRequest{})
	if f.GetFaults().GetLatencyMaxMs() != 30 {
		t.Fatalf("faults %v", f)
	}
}

// Charges over the stream keep Charge's idempotency, also when each charge
// is slow and many are in flight at once (latency injected: items are
// charged concurrently).
func TestChargesStreamIsIdempotent(t *testing.T) {
	s := gatewaysim.New(gatewaysim.NewMemLedger(), &gatewayv1.Faults{LatencyMinMs: 5, LatencyMaxMs: 20})
	cc := serve(t, s)
	g := gateway.NewGRPC(cc)
	t.Cleanup(g.Close)
	const keys, each = 100, 3
	ids := make([][each]string, keys)
	var wg sync.WaitGroup
	for k := range keys {
		for i := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch, err := g.Charge(context.Background(), charge(fmt.Sprint("key-", k), 100))
				if err != nil {
					t.Error(err)
					return
				}
				ids[k][i] = ch.GetChargeId()
			}()
		}
	}
	wg.Wait()
	for k := range ids {
		if ids[k][0] == "" || ids[k][0] != ids[k][1] || ids[k][1] != ids[k][2] {
			t.Fatalf("key-%d: charges %v, want one", k, ids[k])
		}
	}
	rep, err := s.Report(context.Background(), &gatewayv1.ReportRequest{})
	if err != nil || rep.GetCharges() != keys || len(rep.GetDoubleCharged()) != 0 {
		t.Fatalf("report %v %v: want %d charges, none double", rep, err, keys)
	}
}

// With latency injected, each item of a Charges stream waits out its own:
// an item whose timeout is shorter than the latency is answered
// DEADLINE_EXCEEDED at its timeout and never charged, and items behind it
// with a longer timeout are charged, each after its own latency.
func TestChargesLatencyOutlastingTheTimeout(t *testing.T) {
	s := gatewaysim.New(gatewaysim.NewMemLedger(), &gatewayv1.Faults{LatencyMinMs: 300, LatencyMaxMs: 300})
	cc := serve(t, s)
	st, err := gatewayv1.NewGatewayServiceClient(cc).Charges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	items := []*gatewayv1.ChargeItem{{Tag: 1, Request: charge("short", 100), TimeoutMs: 50}}
	for i := range 20 {
		items = append(items, &gatewayv1.ChargeItem{Tag: uint64(2 + i), Request: charge(fmt.Sprint("long-", i), 100), TimeoutMs: 60_000})
	}
	if err := st.Send(&gatewayv1.ChargesRequest{Items: items}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]*gatewayv1.ChargeResult{}
	var order []uint64
	for len(got) < len(items) {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d answers: %v", len(got), err)
		}
		for _, r := range resp.GetResults() {
			got[r.GetTag()] = r
			order = append(order, r.GetTag())
		}
	}
	if r := got[1]; codes.Code(r.GetCode()) != codes.DeadlineExceeded || r.GetCharge() != nil || order[0] != 1 {
		t.Fatalf("the item whose timeout the latency outlasts: %v (first answered: %d), want DEADLINE_EXCEEDED first", r, order[0])
	}
	for tag := uint64(2); tag < uint64(len(items))+1; tag++ {
		if got[tag].GetCharge().GetChargeId() == "" {
			t.Fatalf("item %d: %v, want a charge", tag, got[tag])
		}
	}
	rep, err := s.Report(context.Background(), &gatewayv1.ReportRequest{})
	if err != nil || rep.GetCharges() != 20 {
		t.Fatalf("report %v %v: want 20 charges (not the timed-out one)", rep, err)
	}
}

// With --late-record, a charge whose caller gave up is still made, late:
// whether its item's deadline passed on the Charges stream, the stream
// itself went away (an executor killed), or a unary call timed out. The
// report counts it. Without the fault, none of them is ever made.
func TestLateRecordMakesTheChargesCallersLeft(t *testing.T) {
	for _, late := range []int64{600, 0} {
		t.Run(fmt.Sprint("late_record_ms=", late), func(t *testing.T) {
			s := gatewaysim.New(gatewaysim.NewMemLedger(), &gatewayv1.Faults{LatencyMinMs: 300, LatencyMaxMs: 300, LateRecordMs: late})
			cc := serve(t, s)
			client := gatewayv1.NewGatewayServiceClient(cc)

			// Its item's deadline passes first.
			st, err := client.Charges(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&gatewayv1.ChargesRequest{Items: []*gatewayv1.ChargeItem{{Tag: 1, Request: charge("timed-out", 100), TimeoutMs: 50}}}); err != nil {
				t.Fatal(err)
			}
			if resp, err := st.Recv(); err != nil || codes.Code(resp.GetResults()[0].GetCode()) != codes.DeadlineExceeded {
				t.Fatalf("the timed-out item: %v %v, want DEADLINE_EXCEEDED", resp, err)
			}
			_ = st.CloseSend()
			// Its stream goes away first.
			ctx, cancel := context.WithCancel(context.Background())
			st2, err := client.Charges(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The first item's answer says the gateway has both.
			if err := st2.Send(&gatewayv1.ChargesRequest{Items: []*gatewayv1.ChargeItem{
				{Tag: 1, Request: charge("stream-gone-first", 100), TimeoutMs: 1},
				{Tag: 2, Request: charge("stream-gone", 100), TimeoutMs: 60_000}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := st2.Recv(); err != nil {
				t.Fatal(err)
			}
			cancel()
			// A unary call times out first (in process: no transport to
			// outlast a short deadline on a loaded machine).
			uctx, ucancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, err = s.Charge(uctx, charge("unary", 100))
			ucancel()
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("the unary charge: %v, want DEADLINE_EXCEEDED", err)
			}

			keys := []string{"timed-out", "stream-gone-first", "stream-gone", "unary"}
			if late == 0 {
				time.Sleep(time.Second) // past any late record
				for _, k := range keys {
					if _, err := s.GetCharge(context.Background(), &gatewayv1.GetChargeRequest{IdempotencyKey: k}); status.Code(err) != codes.NotFound {
						t.Fatalf("%s: %v, want NOT_FOUND: no fault, no late charge", k, err)
					}
				}
				return
			}
			deadline := time.Now().Add(10 * time.Second)
			for _, k := range keys {
				for {
					got, err := s.GetCharge(context.Background(), &gatewayv1.GetChargeRequest{IdempotencyKey: k})
					if err == nil && got.GetCharge().GetStatus() == gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: %v %v, want the late charge made", k, got, err)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			if rep, err := s.Report(context.Background(), &gatewayv1.ReportRequest{}); err != nil || rep.GetLateRecords() != int64(len(keys)) {
				t.Fatalf("report %v %v, want %d late records", rep, err, len(keys))
			}
		})
	}
}
