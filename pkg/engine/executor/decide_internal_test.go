package executor

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// TestDecide: how each attempt's result moves the payment. The rule that
// matters most: probe_first, once set, is cleared only by an attempt that
// proved (strongly consistent read) that no earlier attempt charged, and
// a spent budget ends RETRIES_EXHAUSTED ("not charged") only then.
func TestDecide(t *testing.T) {
	s := &Server{cfg: Config{Backoff: payment.Backoff{time.Minute, time.Minute}}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.m.mismatches = prometheus.NewCounter(prometheus.CounterOpts{Name: "m", Help: "m"})
	notCharged := gateway.Result{Outcome: payment.Retryable, Error: "rate limited"}
	for _, c := range []struct {
		name       string
		probeFirst bool
		retries    int32
		r          gateway.Result
		proven     bool
		status     payment.Status
		dead       payment.DeadReason
		fail       payment.FailReason
		probe      bool
	}{
		{"succeeded", false, 0, gateway.Result{Outcome: payment.Succeeded}, false, payment.Completed, "", "", false},
		{"declined", false, 0, gateway.Result{Outcome: payment.Declined, FailReason: payment.FailDeclined}, false, payment.Failed, "", payment.FailDeclined, false},
		{"cancelled at the gateway awaiting authentication", true, 1, gateway.Result{Outcome: payment.Declined, Found: true, FailReason: payment.FailAuthenticationRequired},
			false, payment.Failed, "", payment.FailAuthenticationRequired, false},
		{"not charged, first attempt", false, 0, notCharged, false, payment.Pending, "", "", false},
		{"not charged after a proven absence: cleared", true, 0, notCharged, true, payment.Pending, "", "", false},
		{"not charged, nothing proven, asked first before: kept", true, 0, notCharged, false, payment.Pending, "", "", true},
		{"uncertain", false, 0, gateway.Result{Outcome: payment.Ambiguous, Uncertain: true}, false, payment.Pending, "", "", true},
		{"uncertain after a proven absence (its own request may land)", true, 0, gateway.Result{Outcome: payment.Retryable, Uncertain: true}, true, payment.Pending, "", "", true},
		{"budget spent, proven not charged", true, 2, notCharged, true, payment.DeadLettered, payment.RetriesExhausted, "", false},
		{"budget spent, nothing proven, asked first before", true, 2, notCharged, false, payment.DeadLettered, payment.AmbiguousUnresolved, "", true},
		{"budget spent, uncertain", false, 2, gateway.Result{Outcome: payment.Ambiguous, Uncertain: true}, false, payment.DeadLettered, payment.AmbiguousUnresolved, "", true},
		{"key conflict", false, 0, gateway.Result{Outcome: payment.KeyConflict}, false, payment.DeadLettered, payment.KeyConflicted, "", false},
		{"key conflict, nothing proven, asked first before", true, 0, gateway.Result{Outcome: payment.KeyConflict}, false, payment.DeadLettered, payment.KeyConflicted, "", true},
		{"mismatch", false, 0, gateway.Result{Outcome: payment.Ambiguous, Uncertain: true, Mismatch: true}, false, payment.DeadLettered, payment.AmbiguousUnresolved, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := s.decide(store.ClaimedPayment{ProbeFirst: c.probeFirst, Retries: c.retries}, c.r, c.proven, time.Now())
			if tr.Status != c.status || tr.DeadReason != c.dead || tr.FailReason != c.fail || tr.ProbeFirst != c.probe {
				t.Fatalf("got %s %q %q probe_first=%v, want %s %q %q probe_first=%v", tr.Status, tr.DeadReason, tr.FailReason, tr.ProbeFirst,
					c.status, c.dead, c.fail, c.probe)
			}
		})
	}
}
