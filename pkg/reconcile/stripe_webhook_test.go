package reconcile_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/gateway/gatewayhook"
	"github.com/paysched/paysched/pkg/reconcile"
)

// stripeEvent is a Stripe event body from testdata, naming payment id.
func stripeEvent(t *testing.T, name string, id uuid.UUID) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "stripe", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(b, []byte("PAYMENT_ID"), []byte(id.String()))
}

func postStripe(t *testing.T, url, sig string, body []byte) int {
	t.Helper()
	return postSigned(t, url, gatewayhook.StripeHeader, sig, body)
}

// TestStripeWebhooks: Stripe-signed payment_intent events go through the
// same fenced moves as gateway-sim's webhooks: a bad or stale signature
// changes nothing, a redelivery applies once, other events are ignored.
func TestStripeWebhooks(t *testing.T) {
	e := newEnv(t)
	secret := []byte("whsec_test_paysched")
	recv := &reconcile.Receiver{DB: e.db, StripeSecret: secret, Log: quiet}
	srv := httptest.NewServer(recv.Stripe())
	defer srv.Close()
	now := time.Now()

	won := e.paymentOf("cus_PaySchedAlice", "PENDING", 1, 1500) // its attempt was ambiguous
	body := stripeEvent(t, "payment_intent.succeeded", won)
	for _, tc := range []struct {
		name string
		sig  string
		body []byte
		want int
	}{
		{"missing signature", "", body, http.StatusBadRequest},
		{"gateway-sim's secret", gatewayhook.Sign([]byte("hook-secret"), now, body), body, http.StatusUnauthorized},
		{"tampered amount", gatewayhook.Sign(secret, now, body), bytes.Replace(body, []byte(`"amount": 1500`), []byte(`"amount": 15`), 1), http.StatusUnauthorized},
		{"replayed (stale timestamp)", gatewayhook.Sign(secret, now.Add(-10*time.Minute), body), body, http.StatusBadRequest},
		{"not an event", gatewayhook.Sign(secret, now, []byte(`{"id":"x"}`)), []byte(`{"id":"x"}`), http.StatusBadRequest},
	} {
		if got := postStripe(t, srv.URL, tc.sig, tc.body); got != tc.want {
			t.Fatalf("%s: %d, want %d", tc.name, got, tc.want)
		}
		if st, _ := e.status(won); st != "PENDING" {
			t.Fatalf("%s moved the payment to %s", tc.name, st)
		}
	}
	for i := range 3 { // Stripe redelivers with a fresh signature
		if got := postStripe(t, srv.URL, gatewayhook.Sign(secret, time.Now(), body), body); got != http.StatusOK {
			t.Fatalf("delivery %d: %d", i, got)
		}
	}
	if st, ref := e.status(won); st != "COMPLETED" || ref != "pi_3PaySchedSucceeded" {
		t.Fatalf("after payment_intent.succeeded: %s %s", st, ref)
	}
	if n := e.count(`SELECT count(*) FROM payment_actions WHERE payment_id = $1 AND action = 'WEBHOOK'`, won); n != 1 {
		t.Fatalf("webhook actions = %d, want 1", n)
	}

	lost := e.paymentOf("cus_PaySchedAlice", "DEAD_LETTERED", 1, 1500)
	fb := stripeEvent(t, "payment_intent.payment_failed", lost)
	if got := postStripe(t, srv.URL, gatewayhook.Sign(secret, time.Now(), fb), fb); got != http.StatusOK {
		t.Fatalf("payment_failed: %d", got)
	}
	var st, lastErr string
	if err := e.db.QueryRow(t.Context(), `SELECT status, coalesce(last_error, '') FROM payments WHERE id = $1`, lost).Scan(&st, &lastErr); err != nil {
		t.Fatal(err)
	}
	if st != "FAILED" || lastErr != "declined: insufficient_funds" {
		t.Fatalf("after payment_intent.payment_failed: %s %q", st, lastErr)
	}

	// payment_failed reports a failed try, not a finished PaymentIntent:
	// one that is processing (or awaiting authentication) may still
	// succeed, so it moves nothing.
	for _, state := range []string{"processing", "requires_action"} {
		open := e.paymentOf("cus_PaySchedAlice", "DEAD_LETTERED", 1, 1500)
		ob := stripeEvent(t, "payment_intent.payment_failed", open)
		ob = bytes.Replace(ob, []byte(`"status": "requires_payment_method"`), []byte(`"status": "`+state+`"`), 1)
		ob = bytes.Replace(ob, []byte("evt_3PaySchedFailed"), []byte("evt_"+state), 1)
		if got := postStripe(t, srv.URL, gatewayhook.Sign(secret, time.Now(), ob), ob); got != http.StatusOK {
			t.Fatalf("payment_failed while %s: %d", state, got)
		}
		if st, _ := e.status(open); st != "DEAD_LETTERED" {
			t.Fatalf("payment_failed while the PaymentIntent is %s moved the payment to %s", state, st)
		}
	}

	// A payment an executor holds is left to it; an event of another type
	// is recorded and ignored.
	busy := e.paymentOf("cus_PaySchedAlice", "PROCESSING", 1, 1500)
	bb := stripeEvent(t, "payment_intent.succeeded", busy)
	bb = bytes.Replace(bb, []byte("evt_3PaySchedSucceeded"), []byte("evt_busy"), 1)
	other := stripeEvent(t, "charge.refunded", busy)
	for _, b := range [][]byte{bb, other} {
		if got := postStripe(t, srv.URL, gatewayhook.Sign(secret, time.Now(), b), b); got != http.StatusOK {
			t.Fatalf("delivery: %d", got)
		}
	}
	if st, _ := e.status(busy); st != "PROCESSING" {
		t.Fatalf("a webhook moved a PROCESSING payment to %s", st)
	}
}
