package reconcile_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/gateway/gatewayhook"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/tools/gatewaysim"
)

// paymentOf is e.payment for payer, at attempt.
func (e *env) paymentOf(payer, status string, attempt int32, amount int64) uuid.UUID {
	e.t.Helper()
	id := e.payment(status, "AMBIGUOUS_UNRESOLVED", amount)
	if status != "DEAD_LETTERED" {
		e.exec(`UPDATE payments SET dead_letter_reason = NULL WHERE id = $1`, id)
	}
	e.exec(`UPDATE payments SET payer = $2, attempt = $3 WHERE id = $1`, id, payer, attempt)
	return id
}

// webhookResults reads paysched_webhooks_total by result.
func webhookResults(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "paysched_webhooks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestWebhooksAreTiedToTheirPayment: a signed event moves a payment only
// when it speaks of that payment as we charged it: the payer's customer
// (Stripe) or payer (gateway-sim), our account (no connected account's
// event), our mode (livemode), and a payment an attempt was made for
// (attempt > 0: the engine never asked the gateway about one never
// claimed). Anything else is ignored, counted by why, and moves nothing.
func TestWebhooksAreTiedToTheirPayment(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	secret, stripeSecret := []byte("hook-secret"), []byte("whsec_test_paysched")
	recv := &reconcile.Receiver{DB: e.db, Secret: secret, StripeSecret: stripeSecret, Metrics: reconcile.NewMetrics(reg), Log: quiet}
	gw, st := httptest.NewServer(recv), httptest.NewServer(recv.Stripe())
	defer gw.Close()
	defer st.Close()

	const alice = "cus_PaySchedAlice"
	stripeBody := func(id uuid.UUID, evt string, edit func(string) string) []byte {
		b := string(stripeEvent(t, "payment_intent.succeeded", id))
		b = strings.Replace(b, "evt_3PaySchedSucceeded", evt, 1)
		if edit != nil {
			b = edit(b)
		}
		return []byte(b)
	}
	simBody := func(id uuid.UUID, evt, payer string, edit func(map[string]any)) []byte {
		ev := gatewaysim.Event(&gatewaysim.Charge{ID: "ch_" + evt, Key: id.String(), Reference: id.String(), Amount: 1500,
			Currency: "USD", Payer: payer, CreatedAt: time.Now()})
		b, _ := json.Marshal(ev)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		m["id"] = evt
		if edit != nil {
			edit(m)
		}
		b, _ = json.Marshal(m)
		return b
	}
	for _, c := range []struct {
		name   string
		payer  string
		status string
		// attempt of the payment; 0: never claimed
		attempt int32
		stripe  bool
		body    func(id uuid.UUID, evt string) []byte
		result  string // the counted result; "applied" moves it
	}{
		{"stripe: the payer's customer", alice, "PENDING", 1, true,
			func(id uuid.UUID, evt string) []byte { return stripeBody(id, evt, nil) }, "applied"},
		{"stripe: the customer of a customer/payment-method payer", alice + "/pm_card_visa", "DEAD_LETTERED", 2, true,
			func(id uuid.UUID, evt string) []byte { return stripeBody(id, evt, nil) }, "applied"},
		{"stripe: another customer", "cus_PaySchedBob", "PENDING", 1, true,
			func(id uuid.UUID, evt string) []byte { return stripeBody(id, evt, nil) }, "ignored_payer"},
		{"stripe: no customer", alice, "PENDING", 1, true,
			func(id uuid.UUID, evt string) []byte {
				return stripeBody(id, evt, func(b string) string {
					return strings.Replace(b, `"customer": "cus_PaySchedAlice"`, `"customer": null`, 1)
				})
			}, "ignored_payer"},
		{"stripe: a connected account's event", alice, "PENDING", 1, true,
			func(id uuid.UUID, evt string) []byte {
				return stripeBody(id, evt, func(b string) string {
					return strings.Replace(b, `"object": "event",`, `"object": "event", "account": "acct_1Connected",`, 1)
				})
			}, "ignored_account"},
		{"stripe: live mode against our test mode", alice, "PENDING", 1, true,
			func(id uuid.UUID, evt string) []byte {
				return stripeBody(id, evt, func(b string) string {
					return strings.Replace(b, `"livemode": false`, `"livemode": true`, 1)
				})
			}, "ignored_livemode"},
		{"stripe: a payment never claimed", alice, "PENDING", 0, true,
			func(id uuid.UUID, evt string) []byte { return stripeBody(id, evt, nil) }, "ignored_unclaimed"},
		{"gateway: the payer", "alice", "PENDING", 1, false,
			func(id uuid.UUID, evt string) []byte { return simBody(id, evt, "alice", nil) }, "applied"},
		{"gateway: another payer", "alice", "PENDING", 1, false,
			func(id uuid.UUID, evt string) []byte { return simBody(id, evt, "mallory", nil) }, "ignored_payer"},
		{"gateway: no payer", "alice", "DEAD_LETTERED", 1, false,
			func(id uuid.UUID, evt string) []byte { return simBody(id, evt, "", nil) }, "ignored_payer"},
		{"gateway: another account", "alice", "PENDING", 1, false,
			func(id uuid.UUID, evt string) []byte {
				return simBody(id, evt, "alice", func(m map[string]any) { m["account"] = "acct_other" })
			}, "ignored_account"},
		{"gateway: live mode against our test mode", "alice", "PENDING", 1, false,
			func(id uuid.UUID, evt string) []byte {
				return simBody(id, evt, "alice", func(m map[string]any) { m["livemode"] = true })
			}, "ignored_livemode"},
		{"gateway: a payment never claimed", "alice", "PENDING", 0, false,
			func(id uuid.UUID, evt string) []byte { return simBody(id, evt, "alice", nil) }, "ignored_unclaimed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := e.paymentOf(c.payer, c.status, c.attempt, 1500)
			evt := "evt_" + strings.ReplaceAll(c.name, " ", "_")
			body := c.body(id, evt)
			before := webhookResults(t, reg)[c.result]
			url, sign := gw.URL, gatewayhook.Header
			key := secret
			if c.stripe {
				url, sign, key = st.URL, gatewayhook.StripeHeader, stripeSecret
			}
			if got := postSigned(t, url, sign, gatewayhook.Sign(key, time.Now(), body), bytes.Clone(body)); got != http.StatusOK {
				t.Fatalf("delivery: %d", got)
			}
			if got := webhookResults(t, reg)[c.result]; got != before+1 {
				t.Errorf("paysched_webhooks_total{result=%q} went from %v to %v, want one more", c.result, before, got)
			}
			status, _ := e.status(id)
			moved := status == "COMPLETED"
			if moved != (c.result == "applied") {
				t.Fatalf("the payment is %s after an event counted %s", status, c.result)
			}
		})
	}
}
