package gatewaysim_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/tools/gatewaysim"
)

// TestGetChargeAllowsTheClockSkewMargin: a probe names the payment's due
// time by the engine's clock (not_before); the gateway stamps a charge by
// its own. With the engine's clock ahead, a charge made at the due time is
// stamped before it: the listing looks from not_before less the contract's
// skew margin, so it finds the charge rather than prove an absence that
// would let the engine charge again. A charge older than the margin is not
// the payment's (it cannot predate its due time by that much).
func TestGetChargeAllowsTheClockSkewMargin(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		ahead time.Duration // the engine's clock ahead of the gateway's
		found bool
	}{
		{"engine 4 minutes ahead: found", 4 * time.Minute, true},
		{"engine just under the margin ahead: found", gateway.ClockSkew - 5*time.Second, true},
		{"engine past the margin ahead: proven absent", gateway.ClockSkew + time.Minute, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ledger := gatewaysim.NewMemLedger()
			// The lookup by key lags a minute: a charge a second old is
			// found only by the listing of the payer's charges.
			s := gatewaysim.New(ledger, &gatewayv1.Faults{ProbeLagMs: 60_000})
			made := time.Now().Add(-time.Second).UTC()
			if _, _, err := ledger.Record(ctx, &gatewaysim.Charge{ID: "ch_1", Key: "pay-1", Reference: "pay-1", Amount: 100,
				Currency: "USD", Payer: "alice", Payee: "bob", CreatedAt: made}); err != nil {
				t.Fatal(err)
			}
			due := made.Add(c.ahead)
			r, err := s.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: "pay-1", Payer: "alice", NotBefore: timestamppb.New(due)})
			if c.found && (err != nil || r.GetCharge().GetChargeId() != "ch_1") {
				t.Fatalf("got %v, %v: want the charge made at the due time by the gateway's clock", r, err)
			}
			if !c.found && !gateway.ProvenAbsent(err) {
				t.Fatalf("got %v, %v: want a proven absence", r, err)
			}
		})
	}
}

// TestGetChargeTellsTheClock: gateway-sim's GetCharge answers carry its
// clock in the date header, found or not, which the services' start check
// reads.
func TestGetChargeTellsTheClock(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, gatewaysim.New(gatewaysim.NewMemLedger(), nil))
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	got, err := gateway.NewGRPC(cc).Clock(context.Background())
	if err != nil || time.Until(got).Abs() > time.Minute {
		t.Fatalf("clock %v, %v: want about now", got, err)
	}
}
