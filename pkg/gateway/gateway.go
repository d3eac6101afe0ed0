// Package gateway is the engine's side of the gateway contract: it charges
// with key = paymentId, asks before it charges again (Probe), and reads
// every answer strictly: only a charge that names this payment's key,
// amount and currency with an explicit status settles anything.
package gateway

import (
	"context"
	"fmt"
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
	// Uncertain: the request may have reached the gateway and no
	// definitive answer came back, so the payment may be charged. The next
	// attempt must ask first, and a cancel must be refused until then.
	Uncertain bool
	// Mismatch: the gateway answered with a charge for another key, amount
	// or currency. Never a success; it needs a human.
	Mismatch bool
	// Found is set by Probe: the gateway holds a charge under the key.
	Found bool
	// Unhealthy: the gateway was unavailable, rate limited or silent (the
	// sweeper's circuit breaker counts it).
	Unhealthy bool
}

// Payment is what a charge needs, as the payment row holds it.
type Payment struct {
	ID                     string
	Payer, Payee, Currency string
	Amount                 int64
}

// Charger charges through a Gateway.
type Charger struct {
	Gateway       Gateway
	ChargeTimeout time.Duration
	ProbeTimeout  time.Duration
}

// Deadline is the longest a charge, with its probe, may take.
func (c *Charger) Deadline(probeFirst bool) time.Duration {
	d := c.ChargeTimeout + c.ProbeTimeout
	if probeFirst {
		d += c.ProbeTimeout
	}
	return d
}

// Charge charges p with key = p.ID. A transport error or a gateway error
// after the request may have been sent is probed with GetCharge at once: a
// strict answer settles it; NOT_FOUND means not charged yet (retry later,
// same key, still asking first: the request may still be in flight); no
// answer stays ambiguous.
func (c *Charger) Charge(ctx context.Context, p Payment) Result {
	cctx, cancel := context.WithTimeout(ctx, c.ChargeTimeout)
	ch, err := c.Gateway.Charge(cctx, &gatewayv1.ChargeRequest{
		IdempotencyKey: p.ID, Amount: p.Amount, Currency: p.Currency, Payer: p.Payer, Payee: p.Payee, Reference: p.ID,
	})
	cancel()
	if err == nil {
		return Read(ch, p)
	}
	msg := status.Convert(err).Message()
	switch status.Code(err) {
	case codes.ResourceExhausted:
		// The gateway's rate limit (or a local limit before sending): the
		// gateway refused it, nothing was charged.
		return Result{Outcome: payment.Retryable, Error: "rate limited: " + msg, Unhealthy: true}
	case codes.FailedPrecondition:
		// The key names a charge with other parameters: that charge is not
		// this payment's, and charging again would not help.
		return Result{Outcome: payment.KeyConflict, Error: "key conflict: " + msg}
	case codes.Unauthenticated, codes.PermissionDenied:
		// The gateway refused the caller before it looked at the charge: a
		// credentials problem, so nothing was charged and the breaker should
		// stop the flow until an operator fixes it.
		return Result{Outcome: payment.Retryable, Error: "refused by the gateway: " + msg, Unhealthy: true}
	}
	// UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, ...: gRPC answers
	// these also when the connection dropped after the request was sent.
	first := "charge: " + msg
	r := c.Probe(ctx, p)
	r.Uncertain = true
	switch {
	case r.Found:
		r.Error = first + "; probe: " + r.Error
		r.Uncertain = r.Outcome != payment.Succeeded && r.Outcome != payment.Declined
		return r
	case r.Outcome == payment.Retryable:
		r.Error = first + "; probe: not charged yet"
	default:
		r.Error = first + "; probe: " + r.Error
	}
	r.Unhealthy = true
	return r
}

// Probe asks the gateway whether it holds a charge under p's key. Found
// with a strict Read of the charge; NOT_FOUND: Retryable, not Found; no
// answer: Ambiguous.
func (c *Charger) Probe(ctx context.Context, p Payment) Result {
	pctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	defer cancel()
	got, err := c.Gateway.GetCharge(pctx, p.ID)
	switch {
	case err == nil:
		r := Read(got, p)
		r.Found = got != nil
		return r
	case status.Code(err) == codes.NotFound:
		return Result{Outcome: payment.Retryable, Error: "no charge under the key"}
	default:
		return Result{Outcome: payment.Ambiguous, Error: "probe: " + status.Convert(err).Message(), Uncertain: true, Unhealthy: true}
	}
}

// Read maps a charge the gateway returned for p to an outcome, strictly:
// a charge that is missing, names another key, amount or currency, or has
// a status this code does not know is ambiguous, never a success.
func Read(ch *gatewayv1.Charge, p Payment) Result {
	if ch == nil {
		return Result{Outcome: payment.Ambiguous, Error: "gateway answered without a charge", Uncertain: true}
	}
	if ch.GetIdempotencyKey() != p.ID || ch.GetAmount() != p.Amount || ch.GetCurrency() != p.Currency {
		return Result{Outcome: payment.Ambiguous, Ref: ch.GetChargeId(), Uncertain: true, Mismatch: true,
			Error: fmt.Sprintf("gateway answered charge %s for key %q, %d %s; the payment is %q, %d %s",
				ch.GetChargeId(), ch.GetIdempotencyKey(), ch.GetAmount(), ch.GetCurrency(), p.ID, p.Amount, p.Currency)}
	}
	switch ch.GetStatus() {
	case gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED:
		return Result{Outcome: payment.Succeeded, Ref: ch.GetChargeId()}
	case gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED:
		return Result{Outcome: payment.Declined, Ref: ch.GetChargeId(), Error: "declined: " + ch.GetDeclineReason()}
	case gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING:
		// Held but undecided (Stripe's processing, requires_action): it may
		// still succeed, so it is never charged anew; ask again later.
		return Result{Outcome: payment.Ambiguous, Ref: ch.GetChargeId(), Uncertain: true,
			Error: "gateway holds charge " + ch.GetChargeId() + " undecided"}
	case gatewayv1.ChargeStatus_CHARGE_STATUS_UNSPECIFIED:
		return Result{Outcome: payment.Ambiguous, Ref: ch.GetChargeId(), Uncertain: true,
			Error: "gateway answered charge " + ch.GetChargeId() + " without a status"}
	default:
		return Result{Outcome: payment.Ambiguous, Ref: ch.GetChargeId(), Uncertain: true,
			Error: fmt.Sprintf("gateway answered charge %s with unknown status %d", ch.GetChargeId(), ch.GetStatus())}
	}
}
