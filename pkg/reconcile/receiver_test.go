package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway/webhook"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/tools/gatewaysim"
)

func post(t *testing.T, url, sig string, body []byte) int {
	t.Helper()
	return postSigned(t, url, webhook.Header, sig, body)
}

// postSigned posts body with sig in header (none when empty) and returns
// the status.
func postSigned(t *testing.T, url, header, sig string, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if sig != "" {
		req.Header.Set(header, sig)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func TestWebhookReceiver(t *testing.T) {
	e := newEnv(t)
	secret := []byte("hook-secret")
	srv := httptest.NewServer(&reconcile.Receiver{DB: e.db, Secret: secret, Log: quiet})
	defer srv.Close()

	p := e.payment("PENDING", "", 100) // its first attempt was ambiguous
	c := &gatewaysim.Charge{ID: "ch_hook", Key: p.String(), Reference: p.String(), Amount: 100, Currency: "USD", CreatedAt: time.Now()}
	body, _ := json.Marshal(gatewaysim.Event(c))
	now := time.Now()

	tampered := bytes.Replace(body, []byte(`"amount":100`), []byte(`"amount":1`), 1)
	for _, tc := range []struct {
		name string
		sig  string
		body []byte
		want int
	}{
		{"missing signature", "", body, http.StatusBadRequest},
		{"malformed signature", "v1=abc", body, http.StatusBadRequest},
		{"tampered body", webhook.Sign(secret, now, body), tampered, http.StatusUnauthorized},
		{"wrong secret", webhook.Sign([]byte("guess"), now, body), body, http.StatusUnauthorized},
		{"replayed (stale timestamp)", webhook.Sign(secret, now.Add(-10*time.Minute), body), body, http.StatusBadRequest},
	} {
		if got := post(t, srv.URL, tc.sig, tc.body); got != tc.want {
			t.Fatalf("%s: %d, want %d", tc.name, got, tc.want)
		}
		if st, _ := e.status(p); st != "PENDING" {
			t.Fatalf("%s moved the payment to %s", tc.name, st)
		}
	}
	if n := e.count(`SELECT count(*) FROM webhook_events`); n != 0 {
		t.Fatalf("rejected deliveries recorded %d events", n)
	}

	// A valid delivery settles the payment; duplicates change nothing.
	for i := range 3 {
		if got := post(t, srv.URL, webhook.Sign(secret, time.Now(), body), body); got != http.StatusOK {
			t.Fatalf("delivery %d: %d", i, got)
		}
	}
	if st, ref := e.status(p); st != "COMPLETED" || ref != "ch_hook" {
		t.Fatalf("after the webhook: %s %s", st, ref)
	}
	if n := e.count(`SELECT count(*) FROM payment_actions WHERE payment_id = $1 AND action = 'WEBHOOK' AND prev_status = 'PENDING'`, p); n != 1 {
		t.Fatalf("webhook actions = %d, want 1", n)
	}

	// A PROCESSING payment is left to its executor.
	busy := e.payment("PROCESSING", "", 200)
	c2 := &gatewaysim.Charge{ID: "ch_busy", Key: busy.String(), Reference: busy.String(), Amount: 200, Currency: "USD", CreatedAt: time.Now()}
	b2, _ := json.Marshal(gatewaysim.Event(c2))
	if got := post(t, srv.URL, webhook.Sign(secret, time.Now(), b2), b2); got != http.StatusOK {
		t.Fatalf("processing delivery: %d", got)
	}
	if st, _ := e.status(busy); st != "PROCESSING" {
		t.Fatalf("webhook moved a PROCESSING payment to %s", st)
	}
}

// The gateway-sim's own sender, end to end: a charge whose answer was lost
// is settled by its webhook, signed and retried until the receiver is up.
func TestGatewaySimDeliversWebhooks(t *testing.T) {
	e := newEnv(t)
	secret := []byte("hook-secret")
	recv := &reconcile.Receiver{DB: e.db, Secret: secret, Log: quiet}
	up := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-up:
			recv.ServeHTTP(w, r)
		default:
			w.WriteHeader(http.StatusServiceUnavailable) // not up yet: the sender retries
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sender := &webhook.Sender{URL: srv.URL, Secret: secret, Backoff: 20 * time.Millisecond, Log: quiet}
	sender.Start(ctx, 2)
	e.sim.OnCharge = func(c *gatewaysim.Charge) { sender.Enqueue(gatewaysim.Event(c)) }

	p := e.payment("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 300)
	if _, err := e.sim.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: p.String(), Reference: p.String(),
		Amount: 300, Currency: "USD", Payer: "alice", Payee: "bob"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	close(up)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, _ := e.status(p); st == "COMPLETED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the webhook never settled the payment")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sender.Delivered.Load() != 1 {
		t.Fatalf("delivered %d", sender.Delivered.Load())
	}
}
