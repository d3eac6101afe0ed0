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
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/gatewayhook"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/tools/gatewaysim"
)

func post(t *testing.T, url, sig string, body []byte) int {
	t.Helper()
	return postSigned(t, url, gatewayhook.Header, sig, body)
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
	c := &gatewaysim.Charge{ID: "ch_hook", Key: p.String(), Reference: p.String(), Payer: "alice", Amount: 100, Currency: "USD", CreatedAt: time.Now()}
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
		{"tampered body", gatewayhook.Sign(secret, now, body), tampered, http.StatusUnauthorized},
		{"wrong secret", gatewayhook.Sign([]byte("guess"), now, body), body, http.StatusUnauthorized},
		{"replayed (stale timestamp)", gatewayhook.Sign(secret, now.Add(-10*time.Minute), body), body, http.StatusBadRequest},
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
		if got := post(t, srv.URL, gatewayhook.Sign(secret, time.Now(), body), body); got != http.StatusOK {
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
	c2 := &gatewaysim.Charge{ID: "ch_busy", Key: busy.String(), Reference: busy.String(), Payer: "alice", Amount: 200, Currency: "USD", CreatedAt: time.Now()}
	b2, _ := json.Marshal(gatewaysim.Event(c2))
	if got := post(t, srv.URL, gatewayhook.Sign(secret, time.Now(), b2), b2); got != http.StatusOK {
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
	sender := &gatewayhook.Sender{URL: srv.URL, Secret: secret, Backoff: 20 * time.Millisecond, Log: quiet}
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

// A correctly signed event about a charge of another amount or currency
// than the payment's moves nothing; one without an amount is refused
// outright (the amount check would otherwise be skipped).
func TestWebhookAmountMustMatch(t *testing.T) {
	e := newEnv(t)
	secret := []byte("hook-secret")
	srv := httptest.NewServer(&reconcile.Receiver{DB: e.db, Secret: secret, Log: quiet})
	defer srv.Close()
	for _, c := range []struct {
		name     string
		amount   int64
		currency string
		want     int
	}{
		{"another amount", 101, "USD", http.StatusOK},
		{"another currency", 100, "EUR", http.StatusOK},
		{"amount 0", 0, "USD", http.StatusBadRequest},
		{"no currency", 100, "", http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := e.payment("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 100)
			ch := &gatewaysim.Charge{ID: "ch_" + p.String()[:8], Key: p.String(), Reference: p.String(), Amount: c.amount, Currency: c.currency, CreatedAt: time.Now()}
			body, _ := json.Marshal(gatewaysim.Event(ch))
			if got := post(t, srv.URL, gatewayhook.Sign(secret, time.Now(), body), body); got != c.want {
				t.Fatalf("answered %d, want %d", got, c.want)
			}
			if st, _ := e.status(p); st != "DEAD_LETTERED" {
				t.Fatalf("a signed event about another charge moved the payment to %s", st)
			}
		})
	}
}

// An event that arrives while the payment is PROCESSING is recorded and
// not applied, and that is harmless: here the executor's attempt ends
// without the outcome (its answer lost, its probe unanswered: PENDING,
// asking first), and the next attempt's probe finds the very charge the
// event spoke of. One charge, COMPLETED with it.
func TestWebhookWhileProcessingIsHarmless(t *testing.T) {
	e := newEnv(t)
	secret := []byte("hook-secret")
	srv := httptest.NewServer(&reconcile.Receiver{DB: e.db, Secret: secret, Log: quiet})
	defer srv.Close()
	p := e.payment("PROCESSING", "", 100)
	ch := e.charge(p.String(), p.String(), 100, time.Now())
	c, _ := e.ledger.Get(context.Background(), p.String())
	body, _ := json.Marshal(gatewaysim.Event(c))
	if got := post(t, srv.URL, gatewayhook.Sign(secret, time.Now(), body), body); got != http.StatusOK {
		t.Fatalf("delivery: %d", got)
	}
	if st, _ := e.status(p); st != "PROCESSING" {
		t.Fatalf("applied over the executor: %s", st)
	}
	// The attempt ends uncertain (as an executor whose answer and probe
	// were lost records it): PENDING, probe_first.
	e.exec(`UPDATE payments SET status = 'PENDING', probe_first = true, lease_until = NULL, lease_owner = NULL WHERE id = $1`, p)
	// The next attempt asks the gateway first, as the executor does.
	charger := &gateway.Charger{Gateway: e.gw, ProbeTimeout: 5 * time.Second}
	r := charger.Probe(context.Background(), gateway.ChargeInput{ID: p.String(), Payer: "alice", Amount: 100, Currency: "USD"})
	if r.Outcome != payment.Succeeded || r.Ref != ch {
		t.Fatalf("the next attempt's probe: %+v, want the event's charge %s", r, ch)
	}
}
