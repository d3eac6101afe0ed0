package gateway_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
)

// fakeGateway answers Charge and GetCharge as told.
type fakeGateway struct {
	gatewayv1.GatewayServiceClient
	charge    *gatewayv1.Charge
	chargeErr error
	probe     *gatewayv1.Charge
	probeErr  error
	probed    int
}

func (f *fakeGateway) Charge(context.Context, *gatewayv1.ChargeRequest, ...grpc.CallOption) (*gatewayv1.ChargeResponse, error) {
	if f.chargeErr != nil {
		return nil, f.chargeErr
	}
	return &gatewayv1.ChargeResponse{Charge: f.charge}, nil
}

func (f *fakeGateway) GetCharge(context.Context, *gatewayv1.GetChargeRequest, ...grpc.CallOption) (*gatewayv1.GetChargeResponse, error) {
	f.probed++
	if f.probeErr != nil {
		return nil, f.probeErr
	}
	return &gatewayv1.GetChargeResponse{Charge: f.probe}, nil
}

var pay = gateway.Payment{ID: "0190b6c2-8f00-7000-8000-000000000001", Payer: "alice", Payee: "bob", Currency: "EUR", Amount: 1500}

// charge is the gateway's charge for pay, changed by edit.
func charge(st gatewayv1.ChargeStatus, edit ...func(*gatewayv1.Charge)) *gatewayv1.Charge {
	c := &gatewayv1.Charge{ChargeId: "ch_1", IdempotencyKey: pay.ID, Reference: pay.ID, Amount: pay.Amount,
		Currency: pay.Currency, Status: st}
	for _, e := range edit {
		e(c)
	}
	return c
}

// TestAnswersAreReadStrictly: only an explicit status on a charge that
// names this payment's key, amount and currency settles anything; every
// other answer leaves the payment to be asked about again.
func TestAnswersAreReadStrictly(t *testing.T) {
	succeeded, declined := gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED, gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED
	for _, c := range []struct {
		name      string
		gw        fakeGateway
		want      payment.AttemptOutcome
		uncertain bool
		mismatch  bool
		probed    int
	}{
		{"succeeded", fakeGateway{charge: charge(succeeded)}, payment.Succeeded, false, false, 0},
		{"declined", fakeGateway{charge: charge(declined)}, payment.Declined, false, false, 0},
		{"no status", fakeGateway{charge: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_UNSPECIFIED)}, payment.Ambiguous, true, false, 0},
		{"unknown status", fakeGateway{charge: charge(gatewayv1.ChargeStatus(9))}, payment.Ambiguous, true, false, 0},
		{"no charge in the answer", fakeGateway{}, payment.Ambiguous, true, false, 0},
		{"another key", fakeGateway{charge: charge(succeeded, func(c *gatewayv1.Charge) { c.IdempotencyKey = "other" })}, payment.Ambiguous, true, true, 0},
		{"another amount", fakeGateway{charge: charge(succeeded, func(c *gatewayv1.Charge) { c.Amount = 1501 })}, payment.Ambiguous, true, true, 0},
		{"another currency", fakeGateway{charge: charge(succeeded, func(c *gatewayv1.Charge) { c.Currency = "USD" })}, payment.Ambiguous, true, true, 0},
		{"key reused with other parameters", fakeGateway{chargeErr: status.Error(codes.FailedPrecondition, "key reused"),
			probe: charge(succeeded, func(c *gatewayv1.Charge) { c.Amount = 9 })}, payment.KeyConflict, false, false, 0},
		{"rate limited", fakeGateway{chargeErr: status.Error(codes.ResourceExhausted, "slow down")}, payment.Retryable, false, false, 0},
		{"held undecided (processing, requires_action)", fakeGateway{charge: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING)}, payment.Ambiguous, true, false, 0},
		{"refused: no or wrong token", fakeGateway{chargeErr: status.Error(codes.Unauthenticated, "bearer")}, payment.Retryable, false, false, 0},
		{"refused: not allowed", fakeGateway{chargeErr: status.Error(codes.PermissionDenied, "no")}, payment.Retryable, false, false, 0},
		{"unavailable, then charged", fakeGateway{chargeErr: status.Error(codes.Unavailable, "connection reset"),
			probe: charge(succeeded)}, payment.Succeeded, false, false, 1},
		{"unavailable, then not found", fakeGateway{chargeErr: status.Error(codes.Unavailable, "connection reset"),
			probeErr: status.Error(codes.NotFound, "no charge")}, payment.Retryable, true, false, 1},
		{"unavailable, then no answer", fakeGateway{chargeErr: status.Error(codes.Unavailable, "connection reset"),
			probeErr: status.Error(codes.Unavailable, "down")}, payment.Ambiguous, true, false, 1},
		{"deadline, then a charge of another amount", fakeGateway{chargeErr: status.Error(codes.DeadlineExceeded, "slow"),
			probe: charge(succeeded, func(c *gatewayv1.Charge) { c.Amount = 1 })}, payment.Ambiguous, true, true, 1},
		{"internal, then no status", fakeGateway{chargeErr: status.Error(codes.Internal, "oops"),
			probe: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_UNSPECIFIED)}, payment.Ambiguous, true, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := c.gw
			ch := &gateway.Charger{Gateway: gateway.FromClient(&gw), ChargeTimeout: time.Second, ProbeTimeout: time.Second}
			r := ch.Charge(context.Background(), pay)
			if r.Outcome != c.want || r.Uncertain != c.uncertain || r.Mismatch != c.mismatch || gw.probed != c.probed {
				t.Fatalf("got %+v (probed %d), want %s uncertain=%v mismatch=%v probed=%d", r, gw.probed, c.want, c.uncertain, c.mismatch, c.probed)
			}
		})
	}
}

func TestProbe(t *testing.T) {
	for _, c := range []struct {
		name  string
		gw    fakeGateway
		want  payment.AttemptOutcome
		found bool
	}{
		{"charged", fakeGateway{probe: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED)}, payment.Succeeded, true},
		{"declined", fakeGateway{probe: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED)}, payment.Declined, true},
		{"not found", fakeGateway{probeErr: status.Error(codes.NotFound, "none")}, payment.Retryable, false},
		{"no answer", fakeGateway{probeErr: status.Error(codes.DeadlineExceeded, "slow")}, payment.Ambiguous, false},
		{"empty answer", fakeGateway{}, payment.Ambiguous, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := c.gw
			r := (&gateway.Charger{Gateway: gateway.FromClient(&gw), ProbeTimeout: time.Second}).Probe(context.Background(), pay)
			if r.Outcome != c.want || r.Found != c.found {
				t.Fatalf("got %+v, want %s found=%v", r, c.want, c.found)
			}
		})
	}
}
