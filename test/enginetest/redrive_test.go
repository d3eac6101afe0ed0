package enginetest

import (
	"context"
	"testing"
	"time"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/auth"
)

// A payment whose charge went through but whose answer was lost, and whose
// probes failed too, is dead-lettered as AMBIGUOUS_UNRESOLVED. An operator
// re-drives it: the engine charges again under the same key, the gateway
// answers with the charge it already has, and the books hold one charge.
func TestRedrivenDeadLetterIsChargedOnce(t *testing.T) {
	c := newCluster(t, opts{})
	// Parked before it falls due, so the engine has not touched it.
	id := c.schedule(1, "bob", time.Now().Add(2*time.Second))[0]
	ctx := context.Background()
	if _, err := c.sim.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: id.String(), Reference: id.String(),
		Amount: 100, Currency: "USD", Payer: "alice", Payee: "bob"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE payments SET status = 'DEAD_LETTERED', dead_letter_reason = 'AMBIGUOUS_UNRESOLVED', attempt = 1, retries = 3 WHERE id = $1`,
		`INSERT INTO payment_attempts (payment_id, attempt, started_at, finished_at, gateway_key, outcome, executor_id)
		 VALUES ($1, 1, now(), now(), $1::uuid::text, 'AMBIGUOUS', 'gone')`,
	} {
		if _, err := c.db.Exec(ctx, q, id); err != nil {
			t.Fatal(err)
		}
	}
	admin := admin.New(c.db, nil, quiet)
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	if _, err := admin.RedrivePayment(actx, &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: "retry"}); err != nil {
		t.Fatal(err)
	}
	c.waitTerminal(20 * time.Second)
	if st, _ := c.status(id); st != "COMPLETED" {
		t.Fatalf("after re-drive: %s", st)
	}
	as := c.attempts(id)
	if len(as) != 2 || as[1].outcome != "SUCCEEDED" || as[1].key != id.String() {
		t.Fatalf("attempts %+v", as)
	}
	if r := c.report(); r.GetSucceeded() != 1 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("gateway report %v: want exactly one charge", r)
	}
}
