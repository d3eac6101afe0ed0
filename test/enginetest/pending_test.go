package enginetest

import (
	"context"
	"strings"
	"testing"
	"time"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
)

// A charge the gateway holds for the customer's authentication (Stripe's
// requires_action, off-session) is asked about again until its bound;
// then the engine cancels it at the gateway and the payment ends FAILED
// AUTHENTICATION_REQUIRED, charged nowhere. A processing charge that turns
// succeeded in time is simply COMPLETED.
func TestUndecidedChargesEnd(t *testing.T) {
	c := newCluster(t, opts{
		backoff: payment.Backoff{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond},
		bounds:  gateway.Bounds{Action: time.Second, Processing: time.Hour},
		faults:  &gatewayv1.Faults{ProcessingMs: 700}})
	auth := c.schedule(1, "3ds-bob", soon())[0]
	c.setFaults(&gatewayv1.Faults{ProcessingRate: 1, ProcessingMs: 700})
	slow := c.schedule(1, "carol", soon())[0]
	// Make the slow one's charge now, processing, before the engine does.
	if _, err := c.sim.Charge(context.Background(), &gatewayv1.ChargeRequest{IdempotencyKey: slow.String(), Reference: slow.String(),
		Amount: 100, Currency: "USD", Payer: "alice", Payee: "carol"}); err != nil {
		t.Fatal(err)
	}
	c.setFaults(&gatewayv1.Faults{})
	c.waitTerminal(20 * time.Second)
	var st, why, lastErr string
	if err := c.db.QueryRow(context.Background(), `SELECT status, coalesce(failure_reason, ''), coalesce(last_error, '') FROM payments WHERE id = $1`, auth).
		Scan(&st, &why, &lastErr); err != nil {
		t.Fatal(err)
	}
	if st != "FAILED" || why != "AUTHENTICATION_REQUIRED" || !strings.Contains(lastErr, "cancelled at the gateway") {
		t.Fatalf("awaiting authentication: %s %q %q", st, why, lastErr)
	}
	got, err := c.sim.GetCharge(context.Background(), &gatewayv1.GetChargeRequest{IdempotencyKey: auth.String()})
	if err != nil || got.GetCharge().GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED {
		t.Fatalf("the gateway holds %v (%v): the charge must be cancelled there", got, err)
	}
	if st, _ := c.status(slow); st != "COMPLETED" {
		t.Fatalf("processing, then succeeded: %s", st)
	}
	if r := c.report(); r.GetSucceeded() != 1 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("report %v", r)
	}
}
