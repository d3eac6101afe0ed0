package stripeadapter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/gateway"
	stripeadapter "github.com/paysched/paysched/pkg/gateway/stripe"
	"github.com/paysched/paysched/pkg/payment"
)

// history is a fake Stripe holding many PaymentIntents of one customer,
// listed newest first, 100 a page at most, filtered by created[gte], as
// Stripe lists them; each page takes delay. Its customers are all
// deleted (the adapter then lists before it declines).
type history struct {
	t     *testing.T
	pis   []map[string]any // newest first
	delay time.Duration
	pages atomic.Int32
}

// newHistory makes n PaymentIntents of cus created one second apart,
// ending at newest; at[i] (the i-th newest) is for pay.ID with status
// at[i], the rest for other payments, succeeded.
func newHistory(t *testing.T, cus string, n int, newest time.Time, at map[int]string) *history {
	h := &history{t: t}
	for i := range n {
		key, st := fmt.Sprint("other-", i), "succeeded"
		if s, ok := at[i]; ok {
			key, st = pay.ID, s
		}
		h.pis = append(h.pis, map[string]any{"id": fmt.Sprint("pi_", i), "object": "payment_intent", "amount": 1500, "currency": "eur",
			"customer": cus, "status": st, "created": newest.Add(-time.Duration(i) * time.Second).Unix(),
			"metadata": map[string]string{"paysched_payment_id": key}})
	}
	return h
}

func (h *history) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents":
	case r.Method == http.MethodGet && len(r.URL.Path) > len("/v1/customers/"):
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such customer"}}`))
		return
	default:
		h.t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		w.WriteHeader(http.StatusNotFound)
		return
	}
	h.pages.Add(1)
	select {
	case <-time.After(h.delay):
	case <-r.Context().Done():
		return
	}
	gte, _ := strconv.ParseInt(r.Form.Get("created[gte]"), 10, 64)
	limit, _ := strconv.Atoi(r.Form.Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 10
	}
	after := r.Form.Get("starting_after")
	var page []map[string]any
	started := after == ""
	more := false
	for _, pi := range h.pis {
		if pi["created"].(int64) < gte {
			continue
		}
		if !started {
			started = pi["id"] == after
			continue
		}
		if len(page) == limit {
			more = true
			break
		}
		page = append(page, pi)
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "url": "/v1/payment_intents", "has_more": more, "data": page})
}

// TestListingPastItsCapProvesNothing: the adapter's listing of a
// customer's PaymentIntents decides only what it read whole. It starts at
// the due time (less the skew margin) and reads as many pages as the
// probe's (or the charge's) time allows, so a customer with a long history
// is still proven; a listing it could not finish is "unknown" (an unproven
// NOT_FOUND for a probe, UNAVAILABLE for a charge it would not send),
// never DECLINED, never a proven absence, and not the gateway's fault.
func TestListingPastItsCapProvesNothing(t *testing.T) {
	due := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	for _, c := range []struct {
		name  string
		cus   string
		n     int
		since time.Time // the newest PaymentIntent
		at    map[int]string
		delay time.Duration
		// limit is the probe's or the charge's time
		limit  time.Duration
		charge bool // Charge (the customer is deleted) rather than a probe
		want   payment.AttemptOutcome
		absent bool
	}{
		{name: "probe: 2,500 since the due time, read whole: its success, not an earlier decline",
			cus: "cus_alice", n: 2500, since: time.Now(), at: map[int]string{10: "requires_payment_method", 2300: "succeeded"},
			limit: 20 * time.Second, want: payment.Succeeded},
		{name: "probe: more than its time can read: unknown, never the decline it saw",
			cus: "cus_alice", n: 2500, since: time.Now(), at: map[int]string{10: "requires_payment_method"}, delay: 150 * time.Millisecond,
			limit: 700 * time.Millisecond, want: payment.Ambiguous},
		{name: "probe: a long history before the due time: proven absent",
			cus: "cus_alice", n: 12000, since: due.Add(-time.Hour), limit: 20 * time.Second, want: payment.Retryable, absent: true},
		{name: "charge, customer gone: 2,500 since the due time, read whole: its success, not an earlier decline",
			cus: "cus_gone", n: 2500, since: time.Now(), at: map[int]string{10: "requires_payment_method", 2300: "succeeded"},
			limit: 20 * time.Second, charge: true, want: payment.Succeeded},
		{name: "charge, customer gone: a long history before the due time: proven, declined",
			cus: "cus_gone", n: 12000, since: due.Add(-time.Hour), limit: 20 * time.Second, charge: true, want: payment.Declined},
		{name: "charge, customer gone: more than its time can read: unknown, never declined",
			cus: "cus_gone", n: 2500, since: time.Now(), at: map[int]string{10: "requires_payment_method"}, delay: 150 * time.Millisecond,
			limit: 700 * time.Millisecond, charge: true, want: payment.Ambiguous},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHistory(t, c.cus, c.n, c.since, c.at)
			h.delay = c.delay
			srv := httptest.NewServer(h)
			defer srv.Close()
			a, err := stripeadapter.New(stripeadapter.Config{APIKey: apiKey, URL: srv.URL, HTTPClient: srv.Client(), CustomerTTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			ch := &gateway.Charger{Gateway: a, ChargeTimeout: c.limit, ProbeTimeout: c.limit}
			p := gateway.ChargeInput{ID: pay.ID, Payer: c.cus, Payee: "bob", Currency: "EUR", Amount: 1500, DueAt: due}
			var r gateway.Result
			if c.charge {
				r = ch.Charge(context.Background(), p)
			} else {
				r = ch.Probe(context.Background(), p)
			}
			if r.Outcome != c.want || r.Absent != c.absent {
				t.Fatalf("got %+v after %d pages, want %s absent=%v", r, h.pages.Load(), c.want, c.absent)
			}
			if c.want == payment.Ambiguous && !c.charge && r.Unhealthy {
				t.Fatalf("got %+v: a listing the probe's time could not finish is not the gateway's fault", r)
			}
		})
	}
}
