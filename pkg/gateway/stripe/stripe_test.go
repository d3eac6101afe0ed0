package stripeadapter_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	stripeadapter "github.com/paysched/paysched/pkg/gateway/stripe"
	"github.com/paysched/paysched/pkg/payment"
)

// apiKey is the test key; err_auth.json echoes it, as stripe-mock does.
const apiKey = "sk_test_TESTKEY_never_in_errors"

// reply is how the fake Stripe answers one route: a status and a body from
// testdata, or a connection cut after the request was read.
type reply struct {
	code int
	file string
	cut  bool
}

// seen is one request the fake received.
type seen struct {
	method, path, idemKey string
	form                  url.Values
}

// fakeStripe serves testdata bodies by "METHOD /path" (and, for lists,
// "?starting_after=ID").
type fakeStripe struct {
	t      *testing.T
	routes map[string]reply
	mu     sync.Mutex
	reqs   []seen
}

func (f *fakeStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		f.t.Errorf("parse form: %v", err)
	}
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		f.t.Errorf("%s %s: Authorization is not the key", r.Method, r.URL.Path)
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, seen{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), r.Form})
	f.mu.Unlock()
	route := r.Method + " " + r.URL.Path
	if sa := r.Form.Get("starting_after"); sa != "" {
		route += "?starting_after=" + sa
	}
	rep, ok := f.routes[route]
	if !ok {
		f.t.Errorf("unexpected request %s", route)
		http.Error(w, `{"error":{"type":"invalid_request_error","message":"no route"}}`, http.StatusNotFound)
		return
	}
	if rep.cut {
		// The request arrived whole; the answer never leaves.
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			f.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
		return
	}
	body, err := os.ReadFile(filepath.Join("testdata", rep.file))
	if err != nil {
		f.t.Errorf("testdata: %v", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_test")
	w.WriteHeader(rep.code)
	w.Write(body)
}

func (f *fakeStripe) count(method, path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reqs {
		if r.method == method && r.path == path {
			n++
		}
	}
	return n
}

func (f *fakeStripe) find(method, path string) (seen, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.reqs {
		if r.method == method && r.path == path {
			return r, true
		}
	}
	return seen{}, false
}

// serve starts a fake Stripe with routes and an adapter pointed at it.
func serve(t *testing.T, routes map[string]reply) (*stripeadapter.Adapter, *fakeStripe) {
	t.Helper()
	f := &fakeStripe{t: t, routes: routes}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	a, err := stripeadapter.New(stripeadapter.Config{APIKey: apiKey, URL: srv.URL, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return a, f
}

const (
	createPI = "POST /v1/payment_intents"
	searchPI = "GET /v1/payment_intents/search"
	listPI   = "GET /v1/payment_intents"
)

var pay = gateway.ChargeInput{ID: "0190b6c2-8f00-7000-8000-000000000001", Payer: "cus_alice/pm_card", Payee: "acct_bob", Currency: "EUR", Amount: 1500}

// TestChargeOutcomes: each Stripe answer, read by the engine's Charger,
// ends in the outcome docs/GATEWAYS.md's table gives it.
func TestChargeOutcomes(t *testing.T) {
	// The probe lists the customer's PaymentIntents: strongly consistent,
	// so nothing there is a proven absence.
	notFound := reply{200, "list_empty.json", false}
	for _, c := range []struct {
		name      string
		payer     string // default: pay.Payer
		routes    map[string]reply
		want      payment.AttemptOutcome
		uncertain bool
		mismatch  bool
		probed    int
		errHas    string
	}{
		{name: "succeeded", routes: map[string]reply{createPI: {200, "pi_succeeded.json", false}},
			want: payment.Succeeded},
		{name: "402 card_error: declined with decline_code", routes: map[string]reply{createPI: {402, "err_card_declined.json", false}},
			want: payment.Declined, errHas: "generic_decline"},
		{name: "200 requires_payment_method: declined", routes: map[string]reply{createPI: {200, "pi_requires_payment_method.json", false}},
			want: payment.Declined, errHas: "insufficient_funds"},
		{name: "requires_action: pending, ambiguous", routes: map[string]reply{createPI: {200, "pi_requires_action.json", false}},
			want: payment.Ambiguous, uncertain: true},
		{name: "processing: pending, ambiguous", routes: map[string]reply{createPI: {200, "pi_processing.json", false}},
			want: payment.Ambiguous, uncertain: true},
		{name: "requires_confirmation: pending, ambiguous", routes: map[string]reply{createPI: {200, "pi_requires_confirmation.json", false}},
			want: payment.Ambiguous, uncertain: true},
		{name: "requires_capture: pending, ambiguous", routes: map[string]reply{createPI: {200, "pi_requires_capture.json", false}},
			want: payment.Ambiguous, uncertain: true},
		{name: "canceled: declined", routes: map[string]reply{createPI: {200, "pi_canceled.json", false}},
			want: payment.Declined, errHas: "canceled: abandoned"},
		{name: "a status we do not know: ambiguous", routes: map[string]reply{createPI: {200, "pi_unknown_status.json", false}},
			want: payment.Ambiguous, uncertain: true, errHas: "without a status"},
		{name: "a body that does not decode: probed", routes: map[string]reply{createPI: {200, "not_json.html", false}, listPI: notFound},
			want: payment.Retryable, uncertain: true, probed: 1},
		{name: "502 with an HTML body: probed", routes: map[string]reply{createPI: {502, "not_json.html", false}, listPI: notFound},
			want: payment.Retryable, uncertain: true, probed: 1},
		{name: "an answer we do not know (418): probed", routes: map[string]reply{createPI: {418, "err_teapot.json", false}, listPI: notFound},
			want: payment.Retryable, uncertain: true, probed: 1},
		{name: "another amount: mismatch", routes: map[string]reply{createPI: {200, "pi_other_amount.json", false}},
			want: payment.Ambiguous, uncertain: true, mismatch: true},
		{name: "idempotency_error: key conflict", routes: map[string]reply{createPI: {400, "err_idempotency.json", false}},
			want: payment.KeyConflict},
		{name: "409 idempotency_key_in_use: may charge, probed", routes: map[string]reply{createPI: {409, "err_idempotency_in_use.json", false}, listPI: notFound},
			want: payment.Retryable, uncertain: true, probed: 1},
		{name: "429: rate limited", routes: map[string]reply{createPI: {429, "err_rate_limit.json", false}},
			want: payment.Retryable, errHas: "rate limited"},
		{name: "500, probe finds nothing: retry, asking first", routes: map[string]reply{createPI: {500, "err_api.json", false}, listPI: notFound},
			want: payment.Retryable, uncertain: true, probed: 1},
		{name: "500, probe finds it succeeded", routes: map[string]reply{createPI: {500, "err_api.json", false}, listPI: {200, "list_succeeded.json", false}},
			want: payment.Succeeded, probed: 1},
		{name: "500, probe fails too", routes: map[string]reply{createPI: {500, "err_api.json", false}, listPI: {503, "err_api.json", false}},
			want: payment.Ambiguous, uncertain: true, probed: 1},
		{name: "401: refused, nothing charged", routes: map[string]reply{createPI: {401, "err_auth.json", false}},
			want: payment.Retryable, errHas: "refused"},
		{name: "403: refused, nothing charged", routes: map[string]reply{createPI: {403, "err_permission.json", false}},
			want: payment.Retryable, errHas: "refused"},
		{name: "connection cut after sending: probed", routes: map[string]reply{createPI: {cut: true}, listPI: notFound},
			want: payment.Retryable, uncertain: true, probed: 1},
		{name: "connection cut, probe finds it succeeded", routes: map[string]reply{createPI: {cut: true}, listPI: {200, "list_succeeded.json", false}},
			want: payment.Succeeded, probed: 1},
		{name: "400 invalid_request_error: nothing charged, for a human", routes: map[string]reply{createPI: {400, "err_invalid_request.json", false}},
			want: payment.KeyConflict, errHas: "invalid request, nothing charged"},
		{name: "payer not a customer: declined unsent", payer: "alice", routes: map[string]reply{},
			want: payment.Declined, errHas: "invalid_payer"},
		{name: "payer without pm: the customer's default", payer: "cus_alice", routes: map[string]reply{
			"GET /v1/customers/cus_alice": {200, "customer.json", false}, createPI: {200, "pi_succeeded.json", false}},
			want: payment.Succeeded},
		{name: "payer without a default pm: declined unsent, once Stripe proves no earlier charge", payer: "cus_nopm", routes: map[string]reply{
			"GET /v1/customers/cus_nopm": {200, "customer_no_pm.json", false}, listPI: {200, "list_other_payment.json", false}},
			want: payment.Declined, errHas: "no_payment_method", probed: 1},
		{name: "payer not found: declined unsent, once Stripe proves no earlier charge", payer: "cus_gone", routes: map[string]reply{
			"GET /v1/customers/cus_gone": {404, "err_no_such_customer.json", false}, listPI: notFound},
			want: payment.Declined, errHas: "no_such_customer", probed: 1},
		{name: "payer deleted after an earlier attempt charged: that charge, never a decline", payer: "cus_gone", routes: map[string]reply{
			"GET /v1/customers/cus_gone": {404, "err_no_such_customer.json", false}, listPI: {200, "list_succeeded.json", false}},
			want: payment.Succeeded, probed: 1},
		{name: "payer gone and Stripe cannot be asked: unknown, never a decline", payer: "cus_gone", routes: map[string]reply{
			"GET /v1/customers/cus_gone": {404, "err_no_such_customer.json", false}, listPI: {503, "err_api.json", false}},
			want: payment.Ambiguous, uncertain: true, probed: 2},
		{name: "customer read fails: nothing charged, retry", payer: "cus_alice", routes: map[string]reply{
			"GET /v1/customers/cus_alice": {500, "err_api.json", false}},
			want: payment.Retryable, errHas: "nothing charged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, f := serve(t, c.routes)
			p := pay
			if c.payer != "" {
				p.Payer = c.payer
			}
			ch := &gateway.Charger{Gateway: a, ChargeTimeout: 5 * time.Second, ProbeTimeout: 5 * time.Second}
			r := ch.Charge(context.Background(), p)
			probed := f.count(http.MethodGet, "/v1/payment_intents")
			if r.Outcome != c.want || r.Uncertain != c.uncertain || r.Mismatch != c.mismatch || probed != c.probed {
				t.Fatalf("got %+v (probed %d), want %s uncertain=%v mismatch=%v probed=%d", r, probed, c.want, c.uncertain, c.mismatch, c.probed)
			}
			if !strings.Contains(r.Error, c.errHas) {
				t.Errorf("error %q does not say %q", r.Error, c.errHas)
			}
			if strings.Contains(r.Error, apiKey) || strings.Contains(r.Error, "TESTKEY") {
				t.Errorf("the API key is in the error: %q", r.Error)
			}
			if _, sent := c.routes[createPI]; !sent {
				if n := f.count(http.MethodPost, "/v1/payment_intents"); n != 0 {
					t.Errorf("%d charges sent, want none", n)
				}
			}
		})
	}
}

// TestChargeRequest: what the adapter sends to create the PaymentIntent.
func TestChargeRequest(t *testing.T) {
	for _, c := range []struct {
		name, payer, payee string
		want               map[string]string // form values; "" must be absent
	}{
		{"pm named, connected payee", "cus_alice/pm_card", "acct_bob", map[string]string{
			"customer": "cus_alice", "payment_method": "pm_card", "transfer_data[destination]": "acct_bob",
			"metadata[paysched_payee]": "acct_bob"}},
		{"default pm, plain payee", "cus_alice", "bob", map[string]string{
			"customer": "cus_alice", "payment_method": "pm_default", "transfer_data[destination]": "",
			"metadata[paysched_payee]": "bob"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, f := serve(t, map[string]reply{createPI: {200, "pi_succeeded.json", false},
				"GET /v1/customers/cus_alice": {200, "customer.json", false}})
			_, err := a.Charge(context.Background(), &gatewayv1.ChargeRequest{IdempotencyKey: pay.ID, Reference: pay.ID,
				Amount: 1500, Currency: "EUR", Payer: c.payer, Payee: c.payee})
			if err != nil {
				t.Fatal(err)
			}
			got, ok := f.find(http.MethodPost, "/v1/payment_intents")
			if !ok {
				t.Fatal("no charge sent")
			}
			want := map[string]string{"amount": "1500", "currency": "eur", "confirm": "true", "off_session": "true",
				"metadata[paysched_payment_id]": pay.ID, "automatic_payment_methods[allow_redirects]": "never"}
			for k, v := range c.want {
				want[k] = v
			}
			for k, v := range want {
				if got.form.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, got.form.Get(k), v)
				}
			}
			if got.idemKey != pay.ID {
				t.Errorf("Idempotency-Key %q, want %q", got.idemKey, pay.ID)
			}
		})
	}
}

// TestCustomerCache: a payer's default payment method is read once.
func TestCustomerCache(t *testing.T) {
	a, f := serve(t, map[string]reply{createPI: {200, "pi_succeeded.json", false},
		"GET /v1/customers/cus_alice": {200, "customer.json", false}})
	for range 3 {
		if _, err := a.Charge(context.Background(), &gatewayv1.ChargeRequest{IdempotencyKey: pay.ID, Amount: 1500, Currency: "EUR", Payer: "cus_alice"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.count(http.MethodGet, "/v1/customers/cus_alice"); n != 1 {
		t.Fatalf("customer read %d times, want 1", n)
	}
}

// TestGetCharge: with the payer, the probe lists the customer's
// PaymentIntents since the due time (strongly consistent) and matches the
// metadata: nothing matching is a proven absence. Without a payer it can
// only search, and a miss there proves nothing.
func TestGetCharge(t *testing.T) {
	due := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name     string
		route    string
		file     string
		payer    string
		code     codes.Code
		proven   bool
		chargeID string
		status   gatewayv1.ChargeStatus
	}{
		{"listed", listPI, "list_succeeded.json", "cus_alice/pm_card", codes.OK, false, "pi_succeeded", gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED},
		{"listed: none", listPI, "list_empty.json", "cus_alice", codes.NotFound, true, "", 0},
		{"listed: only another payment's", listPI, "list_other_payment.json", "cus_alice", codes.NotFound, true, "", 0},
		{"listed: a decline, then a success: the success", listPI, "list_declined_then_succeeded.json", "cus_alice", codes.OK, false, "pi_succeeded", gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED},
		{"listed: two successes: an error, never an answer", listPI, "list_twice_succeeded.json", "cus_alice", codes.Internal, false, "", 0},
		{"payer not a customer: never charged, proven by construction", "", "", "alice", codes.NotFound, true, "", 0},
		{"searched", searchPI, "search_succeeded.json", "", codes.OK, false, "pi_succeeded", gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED},
		{"searched: none, which proves nothing (Search lags)", searchPI, "search_empty.json", "", codes.NotFound, false, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			routes := map[string]reply{}
			if c.route != "" {
				routes[c.route] = reply{200, c.file, false}
			}
			a, f := serve(t, routes)
			ch, err := a.GetCharge(context.Background(), gateway.ProbeRequest(gateway.ChargeInput{ID: pay.ID, Payer: c.payer, DueAt: due}))
			if status.Code(err) != c.code || gateway.ProvenAbsent(err) != c.proven {
				t.Fatalf("code %v proven %v (%v), want %v proven %v", status.Code(err), gateway.ProvenAbsent(err), err, c.code, c.proven)
			}
			switch c.route {
			case searchPI:
				q, _ := f.find(http.MethodGet, "/v1/payment_intents/search")
				if want := "metadata['paysched_payment_id']:'" + pay.ID + "'"; q.form.Get("query") != want {
					t.Errorf("query %q, want %q", q.form.Get("query"), want)
				}
			case listPI:
				q, _ := f.find(http.MethodGet, "/v1/payment_intents")
				// The window starts at the due time less the clock skew allowed.
				if q.form.Get("customer") != "cus_alice" || q.form.Get("created[gte]") != strconv.FormatInt(due.Add(-10*time.Minute).Unix(), 10) {
					t.Errorf("list %v: want customer cus_alice, created[gte] ten minutes before the due time", q.form)
				}
			}
			if err != nil {
				return
			}
			if ch.GetChargeId() != c.chargeID || ch.GetStatus() != c.status || ch.GetIdempotencyKey() != pay.ID ||
				ch.GetCurrency() != "EUR" || ch.GetAmount() != 1500 {
				t.Fatalf("got %v", ch)
			}
		})
	}
}

// TestListSettlements pages a day of balance transactions: only our
// succeeded charges, named by their PaymentIntent, in their own currency.
func TestListSettlements(t *testing.T) {
	a, f := serve(t, map[string]reply{
		"GET /v1/balance_transactions":                      {200, "balance_page1.json", false},
		"GET /v1/balance_transactions?starting_after=txn_3": {200, "balance_page2.json", false},
	})
	var got []string
	token, pages := "", 0
	for {
		resp, err := a.ListSettlements(context.Background(), &gatewayv1.ListSettlementsRequest{Day: "2026-01-01", PageToken: token, PageSize: 3})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, c := range resp.GetCharges() {
			got = append(got, strings.Join([]string{c.GetReference(), c.GetChargeId(), c.GetCurrency(),
				c.GetCreatedAt().AsTime().UTC().Format(time.RFC3339)}, " ")+" "+strconv.FormatInt(c.GetAmount(), 10))
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	want := []string{
		"0190b6c2-8f00-7000-8000-000000000001 pi_1 EUR 2026-01-01T00:00:50Z 1500",
		"0190b6c2-8f00-7000-8000-000000000002 pi_2 GBP 2026-01-01T17:53:19Z 2500",
	}
	if pages != 2 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%d pages:\n%s\nwant 2:\n%s", pages, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	first, _ := f.find(http.MethodGet, "/v1/balance_transactions")
	for k, v := range map[string]string{"created[gte]": "1767225600", "created[lt]": "1767312000", "limit": "3"} {
		if first.form.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, first.form.Get(k), v)
		}
	}
	// stripe-go spells list parameters expand[0], expand[1].
	if e := first.form.Get("expand[0]") + "," + first.form.Get("expand[1]"); e != "data.source,data.source.payment_intent" {
		t.Errorf("expand %v", first.form)
	}
	if _, err := a.ListSettlements(context.Background(), &gatewayv1.ListSettlementsRequest{Day: "01/01/2026"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad day: %v, want InvalidArgument", err)
	}
}

// TestKeyNeverInErrors: every call the adapter makes, refused with a body
// that names the key, fails without it.
func TestKeyNeverInErrors(t *testing.T) {
	auth := reply{401, "err_auth.json", false}
	a, _ := serve(t, map[string]reply{createPI: auth, listPI: auth, "GET /v1/balance_transactions": auth,
		"GET /v1/customers/cus_alice": auth, "POST /v1/payment_intents/pi_1/cancel": auth})
	ctx := context.Background()
	_, e1 := a.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: pay.ID, Amount: 1, Currency: "EUR", Payer: "cus_alice/pm_1"})
	_, e2 := a.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: pay.ID, Amount: 1, Currency: "EUR", Payer: "cus_alice"})
	_, e3 := a.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: pay.ID, Payer: "cus_alice"})
	_, e4 := a.ListSettlements(ctx, &gatewayv1.ListSettlementsRequest{Day: "2026-01-01"})
	_, e5 := a.CancelCharge(ctx, &gatewayv1.CancelChargeRequest{IdempotencyKey: pay.ID, ChargeId: "pi_1"})
	for i, err := range []error{e1, e2, e3, e4, e5} {
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("call %d: %v, want Unauthenticated", i+1, err)
		}
		if err != nil && (strings.Contains(err.Error(), apiKey) || strings.Contains(err.Error(), "TESTKEY")) {
			t.Errorf("call %d: the key is in %q", i+1, err)
		}
	}
}
