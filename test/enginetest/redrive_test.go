package enginetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/auth"
)

// deadLetter parks payment id as an AMBIGUOUS_UNRESOLVED dead letter.
func deadLetter(t *testing.T, c *cluster, id uuid.UUID) {
	t.Helper()
	for _, q := range []string{
		`UPDATE payments SET status = 'DEAD_LETTERED', dead_letter_reason = 'AMBIGUOUS_UNRESOLVED', attempt = 1, retries = 3 WHERE id = $1`,
		`INSERT INTO payment_attempts (payment_id, attempt, started_at, finished_at, gateway_key, outcome, executor_id)
		 VALUES ($1, 1, now(), now(), $1::uuid::text, 'AMBIGUOUS', 'gone')`,
	} {
		if _, err := c.db.Exec(context.Background(), q, id); err != nil {
			t.Fatal(err)
		}
	}
}

// A payment whose charge went through but whose answer was lost, and whose
// probes failed too, is dead-lettered as AMBIGUOUS_UNRESOLVED. An operator
// tries to re-drive it, and to resolve it as FAILED: both are refused with
// the charge named, for the gateway, asked first, holds the charge (and
// has forgotten the key, so a re-charge would be a second charge).
func TestRedriveOfAChargedDeadLetterIsRefused(t *testing.T) {
	c := newCluster(t, opts{faults: &gatewayv1.Faults{KeyRetentionMs: 1}})
	// Parked before it falls due, so the engine has not touched it.
	id := c.schedule(1, "bob", time.Now().Add(2*time.Second))[0]
	ctx := context.Background()
	ch, err := c.sim.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: id.String(), Reference: id.String(),
		Amount: 100, Currency: "USD", Payer: "alice", Payee: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	deadLetter(t, c, id)
	adm := admin.New(c.db, nil, c.charger(), quiet)
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	_, err = adm.RedrivePayment(actx, &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: "retry"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), ch.GetCharge().GetChargeId()) {
		t.Fatalf("re-drive of a charged payment: %v, want FAILED_PRECONDITION naming %s", err, ch.GetCharge().GetChargeId())
	}
	_, err = adm.ResolvePayment(actx, &payschedv1.ResolvePaymentRequest{PaymentId: id.String(), Note: "give up"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("resolve of a charged payment: %v, want FAILED_PRECONDITION", err)
	}
	time.Sleep(2500 * time.Millisecond) // past due: an engine that had taken it would have charged it
	if st, _ := c.status(id); st != "DEAD_LETTERED" {
		t.Fatalf("status %s, want DEAD_LETTERED", st)
	}
	if r := c.report(); r.GetSucceeded() != 1 || len(r.GetDoubleCharged()) != 0 {
		t.Fatalf("gateway report %v: want exactly one charge", r)
	}
}

// A dead letter the gateway never charged is re-driven: the engine asks
// again, then charges once under the same key.
func TestRedrivenUnchargedDeadLetterIsChargedOnce(t *testing.T) {
	c := newCluster(t, opts{})
	id := c.schedule(1, "bob", time.Now().Add(2*time.Second))[0]
	ctx := context.Background()
	deadLetter(t, c, id)
	adm := admin.New(c.db, nil, c.charger(), quiet)
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	if _, err := adm.RedrivePayment(actx, &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: "retry"}); err != nil {
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
