package stripeadapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/stripe/stripe-go/v82"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paysched/paysched/pkg/gateway"
)

// toStatus maps a stripe-go error to the port's gRPC status (see
// docs/GATEWAYS.md): only answers that prove nothing was charged get a
// not-charged code; everything else is UNAVAILABLE (or the context's
// code), which the engine reads as "may have charged" and probes.
func (a *Adapter) toStatus(op string, err error) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		// No answer from Stripe: a network error, a cut connection, a
		// body that does not decode. The request may have been executed.
		if errors.Is(err, context.DeadlineExceeded) {
			return status.Errorf(codes.DeadlineExceeded, "stripe: %s: %s", op, a.scrub(err.Error()))
		}
		if errors.Is(err, context.Canceled) {
			return status.Errorf(codes.Canceled, "stripe: %s: %s", op, a.scrub(err.Error()))
		}
		return status.Errorf(codes.Unavailable, "stripe: %s: no answer: %s", op, a.scrub(err.Error()))
	}
	msg := fmt.Sprintf("stripe: %s: %s", op, a.describe(se))
	switch {
	case se.HTTPStatusCode == http.StatusTooManyRequests:
		// Rate limits and lock timeouts: Stripe did not run the request.
		return gateway.RateLimited("%s", msg)
	case se.HTTPStatusCode == http.StatusUnauthorized:
		return status.Error(codes.Unauthenticated, msg)
	case se.HTTPStatusCode == http.StatusForbidden:
		return status.Error(codes.PermissionDenied, msg)
	case se.HTTPStatusCode >= 500 || se.Type == stripe.ErrorTypeAPI:
		return status.Error(codes.Unavailable, msg)
	case se.Type == stripe.ErrorTypeIdempotency &&
		(se.HTTPStatusCode == http.StatusConflict || se.Code == stripe.ErrorCodeIdempotencyKeyInUse):
		// Another request with this key is still running: it may charge.
		return status.Error(codes.Aborted, msg)
	case se.Type == stripe.ErrorTypeIdempotency:
		// The key was used with other parameters: never this payment's
		// success, and charging again would not help.
		return status.Error(codes.FailedPrecondition, msg)
	case se.Type == stripe.ErrorTypeInvalidRequest &&
		(se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusNotFound):
		// Stripe refused the request as invalid: nothing was charged, and
		// Stripe keeps no idempotent result for it. It is a bug or a
		// configuration problem (a missing payment method or account, a
		// parameter), which the same request will hit again: the engine
		// dead-letters it for a human (KEY_CONFLICT), who re-drives once it
		// is fixed. Never DECLINED: our bug must not fail a payer's payment.
		return status.Error(codes.FailedPrecondition, "invalid request, nothing charged: "+msg)
	}
	// An answer this code does not know: it may have charged.
	return status.Error(codes.Unavailable, msg)
}

// describe is what an error says, scrubbed of the key.
func (a *Adapter) describe(se *stripe.Error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", se.HTTPStatusCode)
	for _, kv := range [][2]string{
		{"type", string(se.Type)}, {"code", string(se.Code)}, {"decline_code", string(se.DeclineCode)},
		{"param", se.Param}, {"request_id", se.RequestID},
	} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	if se.Msg != "" {
		fmt.Fprintf(&b, ": %s", se.Msg)
	}
	return a.scrub(b.String())
}

// keyLike is anything shaped like a Stripe API key: Stripe's own messages
// name a masked or (stripe-mock) whole key.
var keyLike = regexp.MustCompile(`\b(sk|rk)_(test|live)_[A-Za-z0-9*]+`)

// scrub removes the API key, and anything shaped like one, from s.
func (a *Adapter) scrub(s string) string {
	if a.key.key != "" {
		s = strings.ReplaceAll(s, a.key.key, "[redacted]")
	}
	return keyLike.ReplaceAllString(s, "[redacted]")
}
