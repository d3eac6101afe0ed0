package stripemock_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	stripeadapter "github.com/paysched/paysched/pkg/gateway/stripe"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/test/stripemock"
)

const paymentID = "0190b6c2-8f00-7000-8000-0000000000aa"

// TestContract makes every request the adapter can make against the real
// stripe-mock, which validates parameters against Stripe's OpenAPI spec:
// each must be accepted and its answer decode. stripe-mock is stateless and
// answers fixtures, so the test also pins what the engine's strict reading
// makes of them (docs/GATEWAYS.md says the same). Run with -v, it prints
// the session.
func TestContract(t *testing.T) {
	sm := stripemock.Start(t)
	rec := &stripemock.Recorder{}
	a, err := stripeadapter.New(stripeadapter.Config{APIKey: stripemock.Key, URL: sm.URL,
		HTTPClient: &http.Client{Transport: rec, Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	charger := &gateway.Charger{Gateway: a, ChargeTimeout: 5 * time.Second, ProbeTimeout: 5 * time.Second}
	p := gateway.ChargeInput{ID: paymentID, Payer: "cus_test/pm_card_visa", Payee: "acct_1Payee", Currency: "EUR", Amount: 1500,
		DueAt: time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)}

	// accepted checks what the calls since the last check sent: the paths
	// wanted, each answered 200 (a 400 is stripe-mock refusing an unknown
	// or invalid parameter) with JSON; and logs the session.
	accepted := func(t *testing.T, mapped string, paths ...string) []stripemock.Entry {
		t.Helper()
		es := rec.Entries()
		var got []string
		for _, e := range es {
			got = append(got, e.Method+" "+e.Path)
			t.Log(e)
			if e.Status != http.StatusOK {
				t.Errorf("%s %s: status %d: %s", e.Method, e.Path, e.Status, e.Body)
			}
			if !json.Valid(e.Body) {
				t.Errorf("%s %s: the answer is not JSON", e.Method, e.Path)
			}
		}
		t.Log("  => " + mapped)
		if strings.Join(got, ", ") != strings.Join(paths, ", ") {
			t.Errorf("requests %v, want %v", got, paths)
		}
		return es
	}

	t.Run("charge with pm and a connected payee", func(t *testing.T) {
		r := charger.Charge(ctx, p)
		accepted(t, result(r), "POST /v1/payment_intents")
		// The fixture reflects amount, currency, customer and
		// payment_method but not metadata, and its status is
		// requires_payment_method: the answer names no payment, so the
		// engine reads a mismatch, never a success.
		if r.Outcome != payment.Ambiguous || !r.Mismatch || !strings.HasPrefix(r.Ref, "pi_") {
			t.Fatalf("got %+v, want AMBIGUOUS, mismatch, a pi_ ref", r)
		}
		ch, err := a.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: paymentID, Reference: paymentID, Amount: 1500, Currency: "EUR", Payer: p.Payer, Payee: p.Payee})
		es := accepted(t, charge(ch, err), "POST /v1/payment_intents")
		if err != nil {
			t.Fatal(err)
		}
		if ch.GetAmount() != 1500 || ch.GetCurrency() != "EUR" || ch.GetIdempotencyKey() != "" || ch.GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED {
			t.Errorf("fixture read as %v: stripe-mock changed; update docs/GATEWAYS.md", ch)
		}
		if f := es[0].Form; f.Get("transfer_data[destination]") != "acct_1Payee" || f.Get("metadata[paysched_payment_id]") != paymentID ||
			f.Get("confirm") != "true" || f.Get("off_session") != "true" || es[0].IdempotencyKey != paymentID {
			t.Errorf("sent %v", es[0])
		}
	})
	t.Run("charge with pm, payee not an account", func(t *testing.T) {
		q := p
		q.Payee = "bob"
		r := charger.Charge(ctx, q)
		es := accepted(t, result(r), "POST /v1/payment_intents")
		if f := es[0].Form; f.Has("transfer_data[destination]") || f.Get("metadata[paysched_payee]") != "bob" {
			t.Errorf("sent %v", es[0])
		}
	})
	t.Run("charge without pm: the customer's default", func(t *testing.T) {
		q := p
		q.Payer = "cus_test"
		r := charger.Charge(ctx, q)
		// The customer fixture has no default payment method: declined
		// without a charge sent, once the customer's PaymentIntents show
		// none of this payment's (the fixture's has no metadata).
		es := accepted(t, result(r), "GET /v1/customers/cus_test", "GET /v1/payment_intents")
		if es[1].Form.Get("customer") != "cus_test" {
			t.Errorf("listed %v", es[1])
		}
		if r.Outcome != payment.Declined || !strings.Contains(r.Error, "no_payment_method") {
			t.Fatalf("got %+v, want DECLINED no_payment_method", r)
		}
	})
	t.Run("get charge without a payer: search", func(t *testing.T) {
		ch, err := a.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: paymentID})
		es := accepted(t, charge(ch, err), "GET /v1/payment_intents/search")
		if err != nil {
			t.Fatal(err)
		}
		if want := "metadata['paysched_payment_id']:'" + paymentID + "'"; es[0].Form.Get("query") != want {
			t.Errorf("query %q", es[0].Form.Get("query"))
		}
		// One fixture PaymentIntent, whatever the query: found, but not
		// this payment's.
		q := p
		q.Payer = ""
		r := charger.Probe(ctx, q)
		accepted(t, result(r), "GET /v1/payment_intents/search")
		if !r.Found || r.Outcome != payment.Ambiguous || !r.Mismatch {
			t.Fatalf("probe %+v, want found, AMBIGUOUS, mismatch", r)
		}
	})
	t.Run("get charge: the customer's PaymentIntents since the due time", func(t *testing.T) {
		r := charger.Probe(ctx, p)
		es := accepted(t, result(r), "GET /v1/payment_intents")
		if f := es[0].Form; f.Get("customer") != "cus_test" || f.Get("created[gte]") != "1767257400" || f.Get("limit") != "100" {
			t.Errorf("sent %v", es[0])
		}
		// The fixture's one PaymentIntent carries no paysched metadata: not
		// this payment's, and the list is strongly consistent, so the
		// absence is proven.
		if r.Found || !r.Absent || r.Outcome != payment.Retryable {
			t.Fatalf("probe %+v, want a proven absence", r)
		}
	})
	t.Run("cancel an undecided charge", func(t *testing.T) {
		ch, err := a.CancelCharge(ctx, &gatewayv1.CancelChargeRequest{IdempotencyKey: paymentID, ChargeId: "pi_1PgafyB7WZ01zgkWSjxsAJo3"})
		es := accepted(t, charge(ch, err), "POST /v1/payment_intents/pi_1PgafyB7WZ01zgkWSjxsAJo3/cancel")
		if err != nil {
			t.Fatal(err)
		}
		if f := es[0].Form; f.Get("cancellation_reason") != "abandoned" || es[0].IdempotencyKey != "cancel-"+paymentID {
			t.Errorf("sent %v", es[0])
		}
		// stripe-mock answers its fixture (requires_payment_method, not
		// canceled: it keeps no state), which reads as declined too.
		if ch.GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED {
			t.Errorf("fixture read as %v: stripe-mock changed; update docs/GATEWAYS.md", ch)
		}
	})
	t.Run("settlements: balance transactions with expand", func(t *testing.T) {
		resp, err := a.ListSettlements(ctx, &gatewayv1.ListSettlementsRequest{Day: "2026-01-01", PageSize: 50})
		mapped := "error " + status.Convert(err).Message()
		if err == nil {
			b, _ := json.Marshal(resp)
			mapped = "settlements " + string(b)
		}
		es := accepted(t, mapped, "GET /v1/balance_transactions")
		if err != nil {
			t.Fatal(err)
		}
		// The fixture's one transaction has an application fee for source:
		// not a charge, so no settlement.
		if len(resp.GetCharges()) != 0 || resp.GetNextPageToken() != "" {
			t.Errorf("got %v, want no settlement on one last page", resp)
		}
		if f := es[0].Form; f.Get("created[gte]") != "1767225600" || f.Get("created[lt]") != "1767312000" || f.Get("expand[1]") != "data.source.payment_intent" {
			t.Errorf("sent %v", es[0])
		}
	})
	t.Run("a bad key: refused, and not in the error", func(t *testing.T) {
		const bad = "not-a-stripe-key-4242"
		b, err := stripeadapter.New(stripeadapter.Config{APIKey: bad, URL: sm.URL, HTTPClient: &http.Client{Transport: rec}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: paymentID, Payer: p.Payer})
		es := rec.Entries()
		for _, e := range es {
			t.Log(e)
		}
		t.Log("  => " + status.Code(err).String() + ": " + status.Convert(err).Message())
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("got %v, want Unauthenticated", err)
		}
		if !strings.Contains(string(es[0].Body), bad) {
			t.Log("stripe-mock no longer echoes the key; the check below still holds")
		}
		if strings.Contains(err.Error(), bad) {
			t.Fatalf("the key is in the error: %v", err)
		}
	})
}

// result is the engine's reading, on one line.
func result(r gateway.Result) string {
	s := string(r.Outcome)
	if r.Uncertain {
		s += " uncertain"
	}
	if r.Mismatch {
		s += " mismatch"
	}
	if r.Found {
		s += " found"
	}
	return s + " ref=" + r.Ref + ": " + r.Error
}

// charge is the adapter's answer, on one line.
func charge(ch *gatewayv1.Charge, err error) string {
	if err != nil {
		return "error " + status.Code(err).String() + ": " + status.Convert(err).Message()
	}
	b, _ := json.Marshal(ch)
	return "charge " + string(b)
}
