package paymentsserver_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
)

// TestPayersSeeNoInternalText: what the gateway, the transport or an
// operator wrote (a payment's last_error, an attempt's error) never
// reaches the payer, over REST or gRPC, on get or list; the stable
// failure reason does.
func TestPayersSeeNoInternalText(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	r := e.do("POST", create, alice, key("internal-text"), body("bob", 700, future(time.Hour)))
	if r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	id := r.json(t)["paymentId"].(string)
	const secret = "issuer-internal-7731 acquirer said: do not honour (operator: refund ticket 55)"
	ctx := context.Background()
	if _, err := e.db.Exec(ctx, `UPDATE payments SET status = 'FAILED', last_error = $2, failure_reason = 'DECLINED', attempt = 1
		WHERE id = $1`, id, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(ctx, `INSERT INTO payment_attempts (payment_id, attempt, gateway_key, outcome, error, finished_at)
		VALUES ($1::uuid, 1, $1::text, 'DECLINED', $2, now())`, id, secret); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{create + "/" + id, create} {
		r := e.do("GET", path, alice, nil, "")
		if r.code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, r.code, r.body)
		}
		if strings.Contains(string(r.body), "issuer-internal") {
			t.Errorf("GET %s shows the payer internal text: %s", path, r.body)
		}
		if !strings.Contains(string(r.body), "DECLINED") {
			t.Errorf("GET %s lacks the failure reason: %s", path, r.body)
		}
	}
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	g, err := c.GetScheduledPayment(authed(alice), &payschedv1.GetScheduledPaymentRequest{PaymentId: id})
	if err != nil {
		t.Fatal(err)
	}
	if g.GetPayment().GetLastError() != "" || len(g.GetPayment().GetAttempts()) == 0 || g.GetPayment().GetAttempts()[0].GetError() != "" {
		t.Errorf("gRPC get shows the payer internal text: %v", g.GetPayment())
	}
}
