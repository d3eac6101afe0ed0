package stripeadapter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	stripeadapter "github.com/paysched/paysched/pkg/gateway/stripe"
	"github.com/paysched/paysched/pkg/payment"
)

// stripeModel is a stateful fake of the Stripe API the adapter uses, with
// the semantics that matter to money: Idempotency-Key replays, a Search
// index that lags its writes, a strongly consistent list, PaymentIntents
// that wait for authentication (customers named cus_3ds*) or stay
// processing for a while (cus_slow*), cancel, deleted customers, and
// injected 429s and cut connections.
type stripeModel struct {
	t         *testing.T
	mu        sync.Mutex
	now       time.Time
	searchLag time.Duration
	slowFor   time.Duration
	pis       []*modelPI
	idem      map[string]idemRecord
	customers map[string]*modelCustomer
	// fail answers the next n requests of a route ("GET /v1/payment_intents") with 429.
	fail map[string]int
	// cutCreates: the next n creates are made, then their connection cut.
	cutCreates int
	creates    int
}

type modelPI struct {
	ID, Customer, Currency, Status, CancellationReason string
	Amount, Created                                    int64
	Metadata                                           map[string]string
	decideAt                                           time.Time
}

type idemRecord struct {
	params string
	id     string
}

type modelCustomer struct {
	deleted bool
	pm      string
}

func newModel(t *testing.T) (*stripeModel, *stripeadapter.Adapter) {
	m := &stripeModel{t: t, now: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC), searchLag: time.Minute, slowFor: 10 * time.Minute,
		idem: map[string]idemRecord{}, fail: map[string]int{},
		customers: map[string]*modelCustomer{"cus_alice": {pm: "pm_a"}, "cus_bob": {pm: "pm_b"}, "cus_3ds": {pm: "pm_3"}, "cus_slow": {pm: "pm_s"}}}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	// No kept-alive connections: net/http replays a request carrying an
	// Idempotency-Key that failed on a reused connection, which would hide
	// the cut connections injected here.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	a, err := stripeadapter.New(stripeadapter.Config{APIKey: apiKey, URL: srv.URL, HTTPClient: hc, CustomerTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	return m, a
}

func (m *stripeModel) clock() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

func (m *stripeModel) advance(d time.Duration) {
	m.mu.Lock()
	m.now = m.now.Add(d)
	m.mu.Unlock()
}

func (m *stripeModel) state(pi *modelPI) *modelPI {
	if pi.Status == "processing" && !m.now.Before(pi.decideAt) {
		pi.Status = "succeeded"
	}
	return pi
}

func (m *stripeModel) json(pi *modelPI) map[string]any {
	return map[string]any{"id": pi.ID, "object": "payment_intent", "amount": pi.Amount, "currency": pi.Currency,
		"customer": pi.Customer, "created": pi.Created, "metadata": pi.Metadata, "status": m.state(pi).Status,
		"cancellation_reason": nilIfEmpty(pi.CancellationReason)}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (m *stripeModel) write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_model")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func stripeErr(typ, code, msg string) map[string]any {
	return map[string]any{"error": map[string]any{"type": typ, "code": code, "message": msg}}
}

func (m *stripeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		m.t.Errorf("parse form: %v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	route := r.Method + " " + r.URL.Path
	if m.fail[route] > 0 {
		m.fail[route]--
		m.write(w, http.StatusTooManyRequests, stripeErr("invalid_request_error", "rate_limit", "Too many requests"))
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case route == "POST /v1/payment_intents":
		m.create(w, r)
	case route == "GET /v1/payment_intents/search":
		var out []any
		for _, pi := range m.pis {
			if strings.Contains(r.Form.Get("query"), "'"+pi.Metadata["paysched_payment_id"]+"'") &&
				!m.now.Before(time.Unix(pi.Created, 0).Add(m.searchLag)) {
				out = append(out, m.json(pi))
			}
		}
		m.write(w, 200, map[string]any{"object": "search_result", "url": r.URL.Path, "has_more": false, "data": nonNil(out)})
	case route == "GET /v1/payment_intents":
		m.list(w, r)
	case r.Method == "GET" && len(parts) == 3 && parts[1] == "payment_intents":
		if pi := m.find(parts[2]); pi != nil {
			m.write(w, 200, m.json(pi))
			return
		}
		m.write(w, 404, stripeErr("invalid_request_error", "resource_missing", "No such payment_intent"))
	case r.Method == "POST" && len(parts) == 4 && parts[1] == "payment_intents" && parts[3] == "cancel":
		pi := m.find(parts[2])
		switch {
		case pi == nil:
			m.write(w, 404, stripeErr("invalid_request_error", "resource_missing", "No such payment_intent"))
		case m.state(pi).Status == "requires_action" || pi.Status == "requires_payment_method" || pi.Status == "requires_confirmation":
			pi.Status, pi.CancellationReason = "canceled", r.Form.Get("cancellation_reason")
			m.write(w, 200, m.json(pi))
		default:
			m.write(w, 400, stripeErr("invalid_request_error", "payment_intent_unexpected_state",
				"You cannot cancel this PaymentIntent because it has a status of "+pi.Status+"."))
		}
	case r.Method == "GET" && len(parts) == 3 && parts[1] == "customers":
		c, ok := m.customers[parts[2]]
		switch {
		case !ok:
			m.write(w, 404, stripeErr("invalid_request_error", "resource_missing", "No such customer: '"+parts[2]+"'"))
		case c.deleted:
			m.write(w, 200, map[string]any{"id": parts[2], "object": "customer", "deleted": true})
		default:
			m.write(w, 200, map[string]any{"id": parts[2], "object": "customer", "invoice_settings": map[string]any{"default_payment_method": c.pm}})
		}
	default:
		m.t.Errorf("unexpected request %s", route)
		m.write(w, 404, stripeErr("invalid_request_error", "", "no route"))
	}
}

func nonNil(v []any) []any {
	if v == nil {
		return []any{}
	}
	return v
}

func (m *stripeModel) find(id string) *modelPI {
	for _, pi := range m.pis {
		if pi.ID == id {
			return pi
		}
	}
	return nil
}

func (m *stripeModel) create(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	keys := make([]string, 0, len(r.Form))
	for k := range r.Form {
		keys = append(keys, k+"="+r.Form.Get(k))
	}
	sort.Strings(keys)
	params := strings.Join(keys, "&")
	if rec, ok := m.idem[key]; ok {
		if rec.params != params {
			m.write(w, 400, stripeErr("idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with."))
			return
		}
		m.write(w, 200, m.json(m.find(rec.id)))
		return
	}
	m.creates++
	amount, _ := strconv.ParseInt(r.Form.Get("amount"), 10, 64)
	pi := &modelPI{ID: fmt.Sprintf("pi_%d", len(m.pis)+1), Customer: r.Form.Get("customer"), Currency: r.Form.Get("currency"),
		Amount: amount, Created: m.now.Unix(), Status: "succeeded",
		Metadata: map[string]string{"paysched_payment_id": r.Form.Get("metadata[paysched_payment_id]")}}
	switch {
	case strings.HasPrefix(pi.Customer, "cus_3ds"):
		pi.Status = "requires_action"
	case strings.HasPrefix(pi.Customer, "cus_slow"):
		pi.Status, pi.decideAt = "processing", m.now.Add(m.slowFor)
	}
	m.pis = append(m.pis, pi)
	m.idem[key] = idemRecord{params: params, id: pi.ID}
	if m.cutCreates > 0 {
		m.cutCreates--
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	m.write(w, 200, m.json(pi))
}

// list is Stripe's list: newest first, filtered by customer and created,
// paged with starting_after; read from the primary store, so it sees
// every PaymentIntent at once.
func (m *stripeModel) list(w http.ResponseWriter, r *http.Request) {
	gte, _ := strconv.ParseInt(r.Form.Get("created[gte]"), 10, 64)
	limit, _ := strconv.Atoi(r.Form.Get("limit"))
	if limit <= 0 {
		limit = 10
	}
	var all []*modelPI
	for i := len(m.pis) - 1; i >= 0; i-- {
		pi := m.pis[i]
		if (r.Form.Get("customer") == "" || pi.Customer == r.Form.Get("customer")) && pi.Created >= gte {
			all = append(all, pi)
		}
	}
	if after := r.Form.Get("starting_after"); after != "" {
		for i, pi := range all {
			if pi.ID == after {
				all = all[i+1:]
				break
			}
		}
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	out := []any{}
	for _, pi := range all {
		out = append(out, m.json(pi))
	}
	m.write(w, 200, map[string]any{"object": "list", "url": r.URL.Path, "has_more": more, "data": out})
}

// TestStripeSemantics runs the engine's Charger against the model: each
// case is one of Stripe's behaviours that a "no charge" or a decline could
// be wrong about.
func TestStripeSemantics(t *testing.T) {
	due := time.Date(2026, 12, 2, 8, 59, 0, 0, time.UTC)
	newPay := func(payer string) gateway.ChargeInput {
		return gateway.ChargeInput{ID: fmt.Sprintf("0190b6c2-8f00-7000-8000-%012d", time.Now().UnixNano()%1e12), Payer: payer,
			Payee: "acct_x", Currency: "EUR", Amount: 1500, DueAt: due}
	}
	charger := func(m *stripeModel, a *stripeadapter.Adapter) *gateway.Charger {
		return &gateway.Charger{Gateway: a, ChargeTimeout: 5 * time.Second, ProbeTimeout: 5 * time.Second,
			ActionTimeout: time.Hour, ProcessingTimeout: 24 * time.Hour, Now: m.clock}
	}

	t.Run("Search lags: a charge whose answer was lost is found by the listing, never missed", func(t *testing.T) {
		m, a := newModel(t)
		m.cutCreates = 1
		p := newPay("cus_alice/pm_a")
		r := charger(m, a).Charge(context.Background(), p)
		if r.Outcome != payment.Succeeded || r.Uncertain {
			t.Fatalf("got %+v: the listing should find the charge Search cannot see yet", r)
		}
		// Asked by key alone (Search), the same charge is invisible: a miss
		// that proves nothing.
		only := p
		only.Payer = ""
		if r := charger(m, a).Probe(context.Background(), only); r.Absent || r.Outcome != payment.Ambiguous || !r.Uncertain {
			t.Fatalf("a Search miss read as %+v; it must be unknown, never absent", r)
		}
		m.advance(2 * time.Minute)
		if r := charger(m, a).Probe(context.Background(), only); r.Outcome != payment.Succeeded {
			t.Fatalf("once the index caught up: %+v", r)
		}
	})

	t.Run("429 on the listing: unknown, never absent", func(t *testing.T) {
		m, a := newModel(t)
		m.cutCreates = 1
		m.fail["GET /v1/payment_intents"] = 1
		r := charger(m, a).Charge(context.Background(), newPay("cus_alice/pm_a"))
		if r.Outcome != payment.Ambiguous || !r.Uncertain || r.Absent {
			t.Fatalf("got %+v", r)
		}
	})

	t.Run("a 429 on the charge itself: nothing charged", func(t *testing.T) {
		m, a := newModel(t)
		m.fail["POST /v1/payment_intents"] = 1
		r := charger(m, a).Charge(context.Background(), newPay("cus_alice/pm_a"))
		if r.Outcome != payment.Retryable || r.Uncertain || m.creates != 0 {
			t.Fatalf("got %+v, %d created", r, m.creates)
		}
	})

	t.Run("customer deleted after an earlier attempt charged: that charge, never a decline", func(t *testing.T) {
		m, a := newModel(t)
		p := newPay("cus_bob")
		m.cutCreates = 1
		m.fail["GET /v1/payment_intents"] = 1 // the attempt's own probe fails: the payment stays unknown
		if r := charger(m, a).Charge(context.Background(), p); r.Outcome != payment.Ambiguous {
			t.Fatalf("first attempt: %+v", r)
		}
		m.customers["cus_bob"].deleted = true
		// A second attempt that (wrongly) charges without asking first: the
		// adapter itself asks before it declines.
		ch, err := a.Charge(context.Background(), &gatewayv1.ChargeRequest{IdempotencyKey: p.ID, Reference: p.ID, Amount: p.Amount,
			Currency: p.Currency, Payer: p.Payer, Payee: p.Payee})
		if err != nil || ch.GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED || m.creates != 1 {
			t.Fatalf("got %v, %v (%d created): the first attempt's charge is the answer", ch, err, m.creates)
		}
		// A payment never charged, whose customer is gone: declined, once
		// the listing proved nothing was.
		q := newPay("cus_bob")
		if r := charger(m, a).Charge(context.Background(), q); r.Outcome != payment.Declined || !strings.Contains(r.Error, "deleted") {
			t.Fatalf("never charged, customer deleted: %+v", r)
		}
	})

	t.Run("requires_action: asked again, then cancelled past its bound (AUTHENTICATION_REQUIRED)", func(t *testing.T) {
		m, a := newModel(t)
		p := newPay("cus_3ds/pm_3")
		ch := charger(m, a)
		if r := ch.Charge(context.Background(), p); r.Outcome != payment.Ambiguous || !r.Uncertain {
			t.Fatalf("charge: %+v", r)
		}
		m.advance(30 * time.Minute)
		if r := ch.Probe(context.Background(), p); r.Outcome != payment.Ambiguous {
			t.Fatalf("within the bound: %+v", r)
		}
		m.advance(31 * time.Minute)
		r := ch.Probe(context.Background(), p)
		if r.Outcome != payment.Declined || r.FailReason != payment.FailAuthenticationRequired || m.pis[0].Status != "canceled" {
			t.Fatalf("past the bound: %+v, Stripe holds %s", r, m.pis[0].Status)
		}
		// Cancelled is final: a later look reads it declined, and a charge
		// again with the key replays the cancelled PaymentIntent.
		if r := ch.Charge(context.Background(), p); r.Outcome != payment.Declined || m.creates != 1 {
			t.Fatalf("after the cancel: %+v, %d created", r, m.creates)
		}
	})

	t.Run("processing turns succeeded", func(t *testing.T) {
		m, a := newModel(t)
		p := newPay("cus_slow/pm_s")
		ch := charger(m, a)
		if r := ch.Charge(context.Background(), p); r.Outcome != payment.Ambiguous || !r.Uncertain {
			t.Fatalf("charge: %+v", r)
		}
		m.advance(11 * time.Minute)
		if r := ch.Probe(context.Background(), p); r.Outcome != payment.Succeeded {
			t.Fatalf("after processing: %+v", r)
		}
	})

	t.Run("processing past its bound, Stripe will not cancel: still unknown, never failed", func(t *testing.T) {
		m, a := newModel(t)
		m.slowFor = 72 * time.Hour
		p := newPay("cus_slow/pm_s")
		ch := charger(m, a)
		ch.Charge(context.Background(), p)
		m.advance(25 * time.Hour)
		if r := ch.Probe(context.Background(), p); r.Outcome != payment.Ambiguous || !r.Uncertain || !strings.Contains(r.Error, "cannot be cancelled") {
			t.Fatalf("got %+v", r)
		}
	})
}
