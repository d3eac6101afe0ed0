// Package gateway is the engine's side of the gateway contract: it charges
// with key = paymentId and turns every answer into one of four outcomes.
package gateway

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/payment"
)

// Result is what an attempt learned.
type Result struct {
	Outcome payment.AttemptOutcome
	Ref     string // charge id
	Error   string
}

// Payment is what a charge needs.
type Payment struct {
	ID                     string
	Payer, Payee, Currency string
	Amount                 int64
}

// Charger charges through a gateway.v1 client.
type Charger struct {
	Client        gatewayv1.GatewayServiceClient
	ChargeTimeout time.Duration
	ProbeTimeout  time.Duration
}

// Charge charges p with key = p.ID. An ambiguous answer is probed with
// GetCharge at once: a definitive answer settles it; NOT_FOUND means it was
// not charged (retry later with the same key); no answer stays ambiguous.
func (c *Charger) Charge(ctx context.Context, p Payment) Result {
	cctx, cancel := context.WithTimeout(ctx, c.ChargeTimeout)
	resp, err := c.Client.Charge(cctx, &gatewayv1.ChargeRequest{
		IdempotencyKey: p.ID, Amount: p.Amount, Currency: p.Currency, Payer: p.Payer, Payee: p.Payee, Reference: p.ID,
	})
	cancel()
	if err == nil {
		return fromCharge(resp.GetCharge())
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted:
		// The gateway refused before charging.
		return Result{Outcome: payment.Retryable, Error: status.Convert(err).Message()}
	}
	first := "charge: " + status.Convert(err).Message()
	pctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	defer cancel()
	got, perr := c.Client.GetCharge(pctx, &gatewayv1.GetChargeRequest{IdempotencyKey: p.ID})
	switch {
	case perr == nil:
		return fromCharge(got.GetCharge())
	case status.Code(perr) == codes.NotFound:
		return Result{Outcome: payment.Retryable, Error: first + "; probe: not charged"}
	default:
		return Result{Outcome: payment.Ambiguous, Error: first + "; probe: " + status.Convert(perr).Message()}
	}
}

func fromCharge(ch *gatewayv1.Charge) Result {
	if ch.GetStatus() == gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED {
		return Result{Outcome: payment.Declined, Ref: ch.GetChargeId(), Error: "declined: " + ch.GetDeclineReason()}
	}
	return Result{Outcome: payment.Succeeded, Ref: ch.GetChargeId()}
}
