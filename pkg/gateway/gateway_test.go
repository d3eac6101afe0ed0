package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	cancel    *gatewayv1.Charge
	cancelErr error
	cancelled int
}

func (f *fakeGateway) CancelCharge(context.Context, *gatewayv1.CancelChargeRequest, ...grpc.CallOption) (*gatewayv1.CancelChargeResponse, error) {
	f.cancelled++
	if f.cancelErr != nil {
		return nil, f.cancelErr
	}
	return &gatewayv1.CancelChargeResponse{Charge: f.cancel}, nil
}

// otherReason is a NOT_FOUND carrying an ErrorInfo that is not the
// contract's proof.
func otherReason() error {
	st, _ := status.New(codes.NotFound, "none").WithDetails(&errdetails.ErrorInfo{Reason: gateway.ReasonChargeAbsent, Domain: "example.com"})
	return st.Err()
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

var pay = gateway.ChargeInput{ID: "0190b6c2-8f00-7000-8000-000000000001", Payer: "alice", Payee: "bob", Currency: "EUR", Amount: 1500}

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
		{"rate limited", fakeGateway{chargeErr: gateway.RateLimited("slow down")}, payment.Retryable, false, false, 0},
		// A RESOURCE_EXHAUSTED the gateway did not mark as its own may be
		// the client's (an answer over its receive limit, after sending).
		{"resource exhausted, unmarked, then charged", fakeGateway{chargeErr: status.Error(codes.ResourceExhausted, "grpc: received message larger than max"),
			probe: charge(succeeded)}, payment.Succeeded, false, false, 1},
		{"resource exhausted, unmarked, then no answer", fakeGateway{chargeErr: status.Error(codes.ResourceExhausted, "grpc: received message larger than max"),
			probeErr: status.Error(codes.Unavailable, "down")}, payment.Ambiguous, true, false, 1},
		{"held undecided (processing, requires_action)", fakeGateway{charge: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING)}, payment.Ambiguous, true, false, 0},
		{"refused: no or wrong token", fakeGateway{chargeErr: status.Error(codes.Unauthenticated, "bearer")}, payment.Retryable, false, false, 0},
		{"refused: not allowed", fakeGateway{chargeErr: status.Error(codes.PermissionDenied, "no")}, payment.Retryable, false, false, 0},
		{"unavailable, then charged", fakeGateway{chargeErr: status.Error(codes.Unavailable, "connection reset"),
			probe: charge(succeeded)}, payment.Succeeded, false, false, 1},
		{"unavailable, then proven not found: not charged yet", fakeGateway{chargeErr: status.Error(codes.Unavailable, "connection reset"),
			probeErr: gateway.Absent("no charge")}, payment.Retryable, true, false, 1},
		{"unavailable, then not found without proof: unknown", fakeGateway{chargeErr: status.Error(codes.Unavailable, "connection reset"),
			probeErr: status.Error(codes.NotFound, "not in the index")}, payment.Ambiguous, true, false, 1},
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
		name   string
		gw     fakeGateway
		want   payment.AttemptOutcome
		found  bool
		absent bool
	}{
		{"charged", fakeGateway{probe: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED)}, payment.Succeeded, true, false},
		{"declined", fakeGateway{probe: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED)}, payment.Declined, true, false},
		{"proven absent", fakeGateway{probeErr: gateway.Absent("none")}, payment.Retryable, false, true},
		// A NOT_FOUND without the proof is an index that may lag: it says
		// nothing, so nothing may act on it as "not charged".
		{"not found, unproven", fakeGateway{probeErr: status.Error(codes.NotFound, "none")}, payment.Ambiguous, false, false},
		{"not found, another domain's reason", fakeGateway{probeErr: otherReason()}, payment.Ambiguous, false, false},
		{"no answer", fakeGateway{probeErr: status.Error(codes.DeadlineExceeded, "slow")}, payment.Ambiguous, false, false},
		{"empty answer", fakeGateway{}, payment.Ambiguous, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := c.gw
			r := (&gateway.Charger{Gateway: gateway.FromClient(&gw), ProbeTimeout: time.Second}).Probe(context.Background(), pay)
			if r.Outcome != c.want || r.Found != c.found || r.Absent != c.absent {
				t.Fatalf("got %+v, want %s found=%v absent=%v", r, c.want, c.found, c.absent)
			}
		})
	}
}

// TestPendingPastItsBoundIsCancelled: an undecided charge is asked about
// again until its bound; past it, it is cancelled at the gateway and the
// payment fails with the bound's reason. A gateway that will not cancel
// leaves it undecided (ambiguous), never failed.
func TestPendingPastItsBoundIsCancelled(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pending := func(why gatewayv1.PendingReason, age time.Duration) *gatewayv1.Charge {
		return charge(gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING, func(c *gatewayv1.Charge) {
			c.PendingReason, c.CreatedAt = why, timestamppb.New(now.Add(-age))
		})
	}
	action, processing := gatewayv1.PendingReason_PENDING_REASON_ACTION_REQUIRED, gatewayv1.PendingReason_PENDING_REASON_PROCESSING
	cancelled := charge(gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED, func(c *gatewayv1.Charge) { c.DeclineReason = "canceled: abandoned" })
	for _, c := range []struct {
		name      string
		gw        fakeGateway
		want      payment.AttemptOutcome
		why       payment.FailReason
		cancelled int
	}{
		{"awaiting authentication, within its bound: asked again", fakeGateway{probe: pending(action, 59*time.Minute)}, payment.Ambiguous, "", 0},
		{"awaiting authentication past its bound: cancelled, AUTHENTICATION_REQUIRED",
			fakeGateway{probe: pending(action, 61*time.Minute), cancel: cancelled}, payment.Declined, payment.FailAuthenticationRequired, 1},
		{"processing past its bound: cancelled, PSP_TIMEOUT",
			fakeGateway{probe: pending(processing, 25*time.Hour), cancel: cancelled}, payment.Declined, payment.FailPSPTimeout, 1},
		{"processing past its bound, the gateway will not cancel: still undecided",
			fakeGateway{probe: pending(processing, 25*time.Hour), cancelErr: status.Error(codes.FailedPrecondition, "processing")}, payment.Ambiguous, "", 1},
		{"past its bound, the cancel finds it succeeded meanwhile: succeeded",
			fakeGateway{probe: pending(action, 2*time.Hour), cancel: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED)}, payment.Succeeded, "", 1},
		{"past its bound, the cancel is not answered: still undecided",
			fakeGateway{probe: pending(action, 2*time.Hour), cancelErr: status.Error(codes.Unavailable, "down")}, payment.Ambiguous, "", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := c.gw
			ch := &gateway.Charger{Gateway: gateway.FromClient(&gw), ProbeTimeout: time.Second,
				ActionTimeout: time.Hour, ProcessingTimeout: 24 * time.Hour, Now: func() time.Time { return now }}
			r := ch.Probe(context.Background(), pay)
			if r.Outcome != c.want || r.FailReason != c.why || gw.cancelled != c.cancelled {
				t.Fatalf("got %+v (cancelled %d), want %s %q cancelled %d", r, gw.cancelled, c.want, c.why, c.cancelled)
			}
			if r.Outcome == payment.Ambiguous && !r.Uncertain {
				t.Fatal("an undecided charge must stay uncertain")
			}
		})
	}
	// No bound: never cancelled, however old.
	gw := fakeGateway{probe: pending(action, 1000*time.Hour), cancel: cancelled}
	ch := &gateway.Charger{Gateway: gateway.FromClient(&gw), ProbeTimeout: time.Second, Now: func() time.Time { return now }}
	if r := ch.Probe(context.Background(), pay); r.Outcome != payment.Ambiguous || gw.cancelled != 0 {
		t.Fatalf("without a bound: %+v, cancelled %d", r, gw.cancelled)
	}
	// The cancel's time is part of the call's deadline (and so of the lease).
	if with, without := (&gateway.Charger{ChargeTimeout: 5 * time.Second, ProbeTimeout: 2 * time.Second, ActionTimeout: time.Hour}).Deadline(true),
		(&gateway.Charger{ChargeTimeout: 5 * time.Second, ProbeTimeout: 2 * time.Second}).Deadline(true); with != without+2*time.Second {
		t.Fatalf("deadline with a bound %s, without %s: the cancel's probe timeout is missing", with, without)
	}
}

// TestGatewayStringsAreCleaned: whatever bytes a gateway sends in a charge
// id, a decline reason or a message, what the engine stores is valid
// UTF-8 without NUL or control characters, and capped.
func TestGatewayStringsAreCleaned(t *testing.T) {
	for _, c := range []struct{ name, in string }{
		{"NUL", "insufficient_funds\x00"},
		{"invalid UTF-8", "bad \xff\xfe bytes"},
		{"controls", "a\x01b\x1bc\x7fd\u0085e"},
		{"long", strings.Repeat("é", 3000)},
		{"long with a cut rune", strings.Repeat("a", 999) + "é" + strings.Repeat("b", 10)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := gateway.Clean(c.in, 1000)
			if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > 1000 {
				t.Fatalf("Clean(%q) = %q: want valid UTF-8, no NUL, at most 1000 bytes", c.in, got)
			}
			for _, r := range got {
				if r < 0x20 && r != '\t' || r >= 0x7f && r < 0xa0 {
					t.Fatalf("Clean(%q) = %q keeps control %U", c.in, got, r)
				}
			}
		})
	}
	if got := gateway.Clean("plain text, ünïcode and\ttab", 1000); got != "plain text, ünïcode and\ttab" {
		t.Fatalf("a clean string changed: %q", got)
	}
	// Read cleans what it stores.
	ch := charge(gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED, func(c *gatewayv1.Charge) {
		c.ChargeId, c.DeclineReason = "ch_\x00\xff", "do_not_honor\x00\xfe"+strings.Repeat("x", 5000)
	})
	r := gateway.Read(ch, pay)
	for _, v := range []string{r.Ref, r.Error} {
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) || len(v) > 1100 {
			t.Fatalf("Read stored %q", v)
		}
	}
}

// TestAbsenceCountsPastTheLongestRequest: a proven absence is one only
// once the payment's last request was sent longer ago than the gateway's
// longest request; sooner, it says "none yet" (ambiguous, with the time
// from which it would count). A charge found is found whenever.
func TestAbsenceCountsPastTheLongestRequest(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	absent := fakeGateway{probeErr: gateway.Absent("none")}
	for _, c := range []struct {
		name     string
		gw       fakeGateway
		sentBy   time.Time
		max      time.Duration
		absent   bool
		provable time.Time
	}{
		{"never sent", absent, time.Time{}, time.Minute, true, time.Time{}},
		{"sent long ago", absent, now.Add(-61 * time.Second), time.Minute, true, time.Time{}},
		{"sent just now", absent, now.Add(-time.Second), time.Minute, false, now.Add(59 * time.Second)},
		{"no longest request", absent, now.Add(-time.Second), 0, true, time.Time{}},
		{"charged, sent just now", fakeGateway{probe: charge(gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED)}, now.Add(-time.Second), time.Minute, false, time.Time{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := c.gw
			p := pay
			p.SentBy = c.sentBy
			ch := &gateway.Charger{Gateway: gateway.FromClient(&gw), ProbeTimeout: time.Second, MaxRequest: c.max,
				Now: func() time.Time { return now }}
			r := ch.Probe(context.Background(), p)
			if r.Absent != c.absent || !r.ProvableAt.Equal(c.provable) {
				t.Fatalf("got %+v, want absent=%v provable at %s", r, c.absent, c.provable)
			}
			if !c.provable.IsZero() && (r.Outcome != payment.Ambiguous || !r.Uncertain || r.Unhealthy) {
				t.Fatalf("too soon: %+v, want an ambiguous, uncertain, healthy answer", r)
			}
		})
	}
}
