// Package gateway is the engine's side of the gateway contract: it charges
// with key = paymentId, asks before it charges again (Probe), and reads
// every answer strictly: only a charge that names this payment's key,
// amount and currency with an explicit status settles anything, and only
// an absence the gateway proved with a strongly consistent read counts as
// "no charge".
package gateway

import (
	"context"
	"flag"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/payment"
)

// ErrorDomain is the ErrorInfo domain of the gateway contract's reasons.
const ErrorDomain = "gateway.paysched.dev"

// ClockSkew is the gateway contract's clock skew margin (gateway.v1,
// docs/GATEWAYS.md): a gateway looking for a payment's charges from its
// due time (not_before) looks from that long before it, since its clock
// and the engine's may disagree; and services refuse to start when the
// database's clock and the gateway's disagree by more.
const ClockSkew = 10 * time.Minute

// ReasonChargeAbsent marks a NOT_FOUND that a strongly consistent read
// proved (proto/gateway/v1, GetCharge).
const ReasonChargeAbsent = "CHARGE_ABSENT"

// ReasonRateLimited marks a RESOURCE_EXHAUSTED the gateway itself sent:
// its rate limit, or a refusal before it did anything. Only that one means
// "not charged": a gRPC client reports its own refusals with the same code
// (an answer over its receive limit, after the request was sent and
// perhaps charged).
const ReasonRateLimited = "RATE_LIMITED"

// RateLimited is the error an implementation answers a charge with when
// the gateway refused it before doing anything (its rate limit; an
// adapter's own refusal before sending): RESOURCE_EXHAUSTED carrying
// ErrorInfo{Reason: RATE_LIMITED}. GRPC marks the Charges stream's
// RESOURCE_EXHAUSTED items so (the gateway answered them); a unary Charge
// must carry the mark on the wire.
func RateLimited(format string, a ...any) error {
	return marked(codes.ResourceExhausted, ReasonRateLimited, format, a...)
}

// IsRateLimited reports whether err is RateLimited's: a RESOURCE_EXHAUSTED
// without the mark may be the client's own, after sending.
func IsRateLimited(err error) bool {
	return hasMark(err, codes.ResourceExhausted, ReasonRateLimited)
}

// Absent is the error an implementation answers GetCharge with when a
// strongly consistent read proved that it holds no charge under the key:
// NOT_FOUND carrying ErrorInfo{Reason: CHARGE_ABSENT}.
func Absent(format string, a ...any) error {
	return marked(codes.NotFound, ReasonChargeAbsent, format, a...)
}

// ProvenAbsent reports whether err is Absent's: a NOT_FOUND without the
// proof (an index that may lag the charges) is not.
func ProvenAbsent(err error) bool {
	return hasMark(err, codes.NotFound, ReasonChargeAbsent)
}

// marked is a status error of code carrying the mark
// ErrorInfo{Reason: reason, Domain: ErrorDomain}.
func marked(code codes.Code, reason, format string, a ...any) error {
	st := status.Newf(code, format, a...)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// hasMark reports whether err is a status error of code carrying marked's
// mark of reason.
func hasMark(err error, code codes.Code, reason string) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == reason && ei.GetDomain() == ErrorDomain {
			return true
		}
	}
	return false
}

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
	// Absent is set by Probe: the gateway proved, with a strongly
	// consistent read, that it holds no charge under the key, and no
	// request of the payment can still be running there (MaxRequest).
	// Only this lets a payment end without a charge, or be charged again
	// after an attempt that may have reached the gateway.
	Absent bool
	// ProvableAt is set by Probe when the gateway proved an absence too
	// soon after the payment's last request (within MaxRequest): not a
	// proof yet, as that request may still charge; from ProvableAt on, the
	// same answer is one.
	ProvableAt time.Time
	// FailReason, with Outcome DECLINED, says why (DECLINED, or the bound
	// after which an undecided charge was cancelled at the gateway).
	FailReason payment.FailReason
	// Unhealthy: the gateway was unavailable, rate limited or silent (the
	// sweeper's circuit breaker counts it).
	Unhealthy bool
}

// ChargeInput is what a charge needs, as the payment row holds it.
type ChargeInput struct {
	ID                     string
	Payer, Payee, Currency string
	Amount                 int64
	// DueAt is the payment's due time: no charge of it is older, so a
	// gateway proving an absence lists the payer's charges from there.
	DueAt time.Time
	// SentBy is when every charge request of the payment's earlier
	// attempts had been sent, by this process's clock (zero: none was
	// ever claimed). A proven absence counts only once it is older than
	// the gateway's longest request (Charger.MaxRequest).
	SentBy time.Time
}

// Charger charges through a Gateway.
type Charger struct {
	Gateway       Gateway
	ChargeTimeout time.Duration
	ProbeTimeout  time.Duration
	// ActionTimeout is how long a charge may wait for the customer's
	// authentication (PENDING, ACTION_REQUIRED) before the next look at it
	// cancels it at the gateway and fails the payment
	// AUTHENTICATION_REQUIRED; 0: never.
	ActionTimeout time.Duration
	// ProcessingTimeout is the same for a charge the gateway keeps
	// processing (PSP_TIMEOUT); 0: never.
	ProcessingTimeout time.Duration
	// MaxRequest is the longest the gateway may take to make a charge
	// after its request was sent, its client gone or not (Stripe finishes
	// a create whose client timed out). An absence it proves counts only
	// once the payment's last request was sent longer ago than this: until
	// then a request still running there may yet charge. 0: an absence
	// counts at once (a gateway that never records a charge its caller
	// left).
	MaxRequest time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// Deadline is the longest a charge, with its probes and a cancel of an
// undecided charge, may take.
func (c *Charger) Deadline(probeFirst bool) time.Duration {
	d := c.ChargeTimeout + c.ProbeTimeout
	if probeFirst {
		d += c.ProbeTimeout
	}
	if c.ActionTimeout > 0 || c.ProcessingTimeout > 0 {
		d += c.ProbeTimeout
	}
	return d
}

func (c *Charger) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Charge charges p with key = p.ID. A transport error or a gateway error
// after the request may have been sent is probed with GetCharge at once: a
// strict answer settles it; a proven absence means not charged yet (retry
// later, same key, still asking first: the request may still be in
// flight); anything else stays ambiguous.
func (c *Charger) Charge(ctx context.Context, p ChargeInput) Result {
	return c.ChargeWithin(ctx, p, c.ChargeTimeout)
}

// ChargeWithin is Charge with the charge call's own deadline capped at
// limit (the executor passes what its claim's lease leaves).
func (c *Charger) ChargeWithin(ctx context.Context, p ChargeInput, limit time.Duration) Result {
	cctx, cancel := context.WithTimeout(ctx, min(c.ChargeTimeout, limit))
	req := &gatewayv1.ChargeRequest{
		IdempotencyKey: p.ID, Amount: p.Amount, Currency: p.Currency, Payer: p.Payer, Payee: p.Payee, Reference: p.ID,
	}
	if !p.DueAt.IsZero() {
		req.NotBefore = timestampOf(p.DueAt)
	}
	ch, err := c.Gateway.Charge(cctx, req)
	cancel()
	if err == nil {
		return c.settlePending(ctx, p, ch, Read(ch, p))
	}
	msg := Clean(status.Convert(err).Message(), maxMessage)
	switch code := status.Code(err); {
	case code == codes.ResourceExhausted && IsRateLimited(err):
		// The gateway's rate limit (or an adapter's refusal before
		// sending), as the gateway said: nothing was charged. A
		// RESOURCE_EXHAUSTED without its mark is the client's own (an
		// answer over its receive limit) and goes on below: the request
		// was sent and may have charged.
		return Result{Outcome: payment.Retryable, Error: "rate limited: " + msg, Unhealthy: true}
	case code == codes.FailedPrecondition:
		// The key names a charge with other parameters: that charge is not
		// this payment's, and charging again would not help.
		return Result{Outcome: payment.KeyConflict, Error: "key conflict: " + msg}
	case code == codes.Unauthenticated, code == codes.PermissionDenied:
		// The gateway refused the caller before it looked at the charge: a
		// credentials problem, so nothing was charged and the breaker should
		// stop the flow until an operator fixes it.
		return Result{Outcome: payment.Retryable, Error: "refused by the gateway: " + msg, Unhealthy: true}
	}
	// UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, ...: gRPC answers
	// these also when the connection dropped after the request was sent.
	first := "charge: " + msg
	// This attempt's own request just went: an absence is "not yet"
	// whenever the earlier ones were sent (below).
	q := p
	q.SentBy = time.Time{}
	r := c.Probe(ctx, q)
	r.Uncertain = true
	switch {
	case r.Found:
		r.Error = first + "; probe: " + r.Error
		r.Uncertain = r.Outcome != payment.Succeeded && r.Outcome != payment.Declined
		return r
	case r.Absent:
		// Proven absent now, but this attempt's own request may still be on
		// its way: not a proof about this attempt.
		r.Absent = false
		r.Error = first + "; probe: not charged yet"
	default:
		r.Error = first + "; " + r.Error
	}
	r.Unhealthy = true
	return r
}

// Probe asks the gateway whether it holds a charge under p's key. Found
// with a strict Read of the charge; a proven absence: Retryable, Absent;
// an absence the gateway could not prove, or no answer: Ambiguous.
func (c *Charger) Probe(ctx context.Context, p ChargeInput) Result {
	pctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	got, err := c.Gateway.GetCharge(pctx, ProbeRequest(p))
	cancel()
	switch {
	case err == nil:
		r := Read(got, p)
		r.Found = got != nil
		return c.settlePending(ctx, p, got, r)
	case ProvenAbsent(err):
		if at := p.SentBy.Add(c.MaxRequest); !p.SentBy.IsZero() && c.now().Before(at) {
			// A request sent less than MaxRequest ago may still be made:
			// "none yet" is all this says.
			return Result{Outcome: payment.Ambiguous, Uncertain: true, ProvableAt: at,
				Error: fmt.Sprintf("probe: no charge yet, but the request sent %s ago may still be made (the gateway's longest request: %s); an absence counts from %s",
					c.now().Sub(p.SentBy).Round(time.Millisecond), c.MaxRequest, at.UTC().Format(time.RFC3339))}
		}
		return Result{Outcome: payment.Retryable, Absent: true, Error: "no charge under the key"}
	case status.Code(err) == codes.NotFound:
		// An index that may lag the charges found nothing: not a proof.
		// The gateway is healthy; it just cannot say yet.
		return Result{Outcome: payment.Ambiguous, Uncertain: true,
			Error: "probe: the gateway found no charge but could not prove there is none: " + Clean(status.Convert(err).Message(), maxMessage)}
	default:
		return Result{Outcome: payment.Ambiguous, Error: "probe: " + Clean(status.Convert(err).Message(), maxMessage), Uncertain: true, Unhealthy: true}
	}
}

// ProbeRequest is the GetCharge request for p: its key, and the payer and
// window in which a strongly consistent listing can prove an absence.
func ProbeRequest(p ChargeInput) *gatewayv1.GetChargeRequest {
	req := &gatewayv1.GetChargeRequest{IdempotencyKey: p.ID, Payer: p.Payer}
	if !p.DueAt.IsZero() {
		req.NotBefore = timestampOf(p.DueAt)
	}
	return req
}

// settlePending cancels, at the gateway, an undecided charge of p that has
// waited past its bound, and returns what the cancel settled: DECLINED
// with AUTHENTICATION_REQUIRED or PSP_TIMEOUT, or whatever the charge
// became meanwhile. Any other result, or a cancel that fails, is r.
func (c *Charger) settlePending(ctx context.Context, p ChargeInput, ch *gatewayv1.Charge, r Result) Result {
	if r.Outcome != payment.Ambiguous || r.Mismatch || ch.GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING {
		return r
	}
	bound, why, what := c.ProcessingTimeout, payment.FailPSPTimeout, "processing at the gateway"
	if ch.GetPendingReason() == gatewayv1.PendingReason_PENDING_REASON_ACTION_REQUIRED {
		bound, why, what = c.ActionTimeout, payment.FailAuthenticationRequired, "waiting for the customer to authenticate"
	}
	if bound <= 0 || ch.GetCreatedAt() == nil {
		return r
	}
	age := c.now().Sub(ch.GetCreatedAt().AsTime())
	if age < bound {
		return r
	}
	after := c.Cancel(ctx, p, r.Ref)
	if after.Outcome == payment.Ambiguous && !after.Found {
		r.Error += "; after " + age.Round(time.Second).String() + ": " + after.Error
		return r
	}
	if after.Outcome == payment.Declined {
		after.FailReason = why
		after.Error = fmt.Sprintf("cancelled at the gateway after %s %s (charge %s)", age.Round(time.Second), what, after.Ref)
	}
	return after
}

// Read maps a charge the gateway returned for p to an outcome, strictly:
// a charge that is missing, names another key, amount or currency, or has
// a status this code does not know is ambiguous, never a success. The
// gateway's strings are cleaned first (Clean): they are stored.
func Read(ch *gatewayv1.Charge, p ChargeInput) Result {
	if ch == nil {
		return Result{Outcome: payment.Ambiguous, Error: "gateway answered without a charge", Uncertain: true}
	}
	id := Clean(ch.GetChargeId(), maxRef)
	if ch.GetIdempotencyKey() != p.ID || ch.GetAmount() != p.Amount || ch.GetCurrency() != p.Currency {
		return Result{Outcome: payment.Ambiguous, Ref: id, Uncertain: true, Mismatch: true,
			Error: Clean(fmt.Sprintf("gateway answered charge %s for key %q, %d %s; the payment is %q, %d %s",
				id, ch.GetIdempotencyKey(), ch.GetAmount(), ch.GetCurrency(), p.ID, p.Amount, p.Currency), maxMessage)}
	}
	switch ch.GetStatus() {
	case gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED:
		return Result{Outcome: payment.Succeeded, Ref: id}
	case gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED:
		return Result{Outcome: payment.Declined, Ref: id, FailReason: payment.FailDeclined,
			Error: "declined: " + Clean(ch.GetDeclineReason(), maxMessage)}
	case gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING:
		// Held but undecided (Stripe's processing, requires_action): it may
		// still succeed, so it is never charged anew; ask again later (and
		// past its bound, settlePending cancels it).
		return Result{Outcome: payment.Ambiguous, Ref: id, Uncertain: true,
			Error: "gateway holds charge " + id + " undecided"}
	case gatewayv1.ChargeStatus_CHARGE_STATUS_UNSPECIFIED:
		return Result{Outcome: payment.Ambiguous, Ref: id, Uncertain: true,
			Error: "gateway answered charge " + id + " without a status"}
	default:
		return Result{Outcome: payment.Ambiguous, Ref: id, Uncertain: true,
			Error: fmt.Sprintf("gateway answered charge %s with unknown status %d", id, ch.GetStatus())}
	}
}

// Bounds are how long an undecided charge may wait before the engine
// cancels it at the gateway (Charger.ActionTimeout, ProcessingTimeout).
type Bounds struct {
	Action, Processing time.Duration
}

// Defaults of the bounds, and why:
//   - an hour for a charge awaiting the customer's authentication: an
//     off-session payment has nobody to authenticate it, but a PSP's own
//     asynchronous flow (an issuer's frictionless check) may still move it
//     on within minutes; past an hour the payer learns the same day that
//     it failed, and why (AUTHENTICATION_REQUIRED);
//   - a day for a charge the gateway keeps processing: a card is decided in
//     seconds, so a day means it is stuck (PSP_TIMEOUT); a bank debit that
//     legitimately takes days cannot be cancelled at Stripe, so the cancel
//     is refused and the engine just keeps asking.
const (
	DefaultActionTimeout     = time.Hour
	DefaultProcessingTimeout = 24 * time.Hour
)

// RegisterBounds adds --action-required-timeout and --processing-timeout
// to fs (the executor's and the reconciler's resolver).
func RegisterBounds(fs *flag.FlagSet) *Bounds {
	b := &Bounds{}
	fs.DurationVar(&b.Action, "action-required-timeout", DefaultActionTimeout,
		"a charge waiting this long for the customer's authentication (3-D Secure) is cancelled at the gateway and the payment FAILED AUTHENTICATION_REQUIRED; 0: never")
	fs.DurationVar(&b.Processing, "processing-timeout", DefaultProcessingTimeout,
		"a charge the gateway keeps processing this long is cancelled there (if it lets it) and the payment FAILED PSP_TIMEOUT; 0: never")
	return b
}

// Validate names a bound that cannot work.
func (b *Bounds) Validate() error {
	if b.Action < 0 || b.Processing < 0 {
		return fmt.Errorf("--action-required-timeout and --processing-timeout must not be negative, got %s and %s", b.Action, b.Processing)
	}
	return nil
}

// Cancel cancels p's undecided charge chargeID at the gateway and reads,
// strictly, what the charge then is: DECLINED (cancelled), or what it was
// decided as meanwhile. An error is Ambiguous.
func (c *Charger) Cancel(ctx context.Context, p ChargeInput, chargeID string) Result {
	cctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	got, err := c.Gateway.CancelCharge(cctx, &gatewayv1.CancelChargeRequest{IdempotencyKey: p.ID, ChargeId: chargeID, Reason: "abandoned"})
	cancel()
	if err != nil {
		return Result{Outcome: payment.Ambiguous, Uncertain: true, Ref: chargeID,
			Error: "cancel at the gateway: " + Clean(status.Convert(err).Message(), maxMessage)}
	}
	r := Read(got, p)
	r.Found = true
	return r
}
