package enginetest

import (
	"context"
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

// lateFaults: every charge takes 400ms, and one whose caller gave up
// sooner is still made 1.5s after it arrived (gateway-sim's --late-record),
// as Stripe finishes a create whose client timed out.
func lateFaults() *gatewayv1.Faults {
	return &gatewayv1.Faults{LatencyMinMs: 400, LatencyMaxMs: 400, LateRecordMs: 1500}
}

// leaveCharge sends id's charge and gives up on it after 100ms, as an
// attempt whose executor timed out or died does: the gateway has nothing
// yet, and makes the charge later. It returns when the request was sent
// (by the database's clock, for requests_sent_by).
func leaveCharge(t *testing.T, c *cluster, id uuid.UUID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.sim.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: id.String(), Reference: id.String(),
		Amount: 100, Currency: "USD", Payer: "alice", Payee: "bob"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("the left charge: %v, want DEADLINE_EXCEEDED", err)
	}
	if _, err := c.db.Exec(context.Background(), `UPDATE payments SET requests_sent_by = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// A payment whose budget is spent is settled by its probe: a proven
// absence ends it RETRIES_EXHAUSTED ("not charged"). A request its last
// attempt left is still running at the gateway, which makes the charge a
// moment later: the absence proven before then was false. With the
// gateway's longest request (3s) the executor hands the payment back until
// the absence would count, finds the charge then, and completes it.
// Without the rule (maxRequest 0) it ends RETRIES_EXHAUSTED, charged.
func TestAnAbsenceCountsOnlyPastTheLongestRequest(t *testing.T) {
	c := newCluster(t, opts{noSweeper: true, faults: lateFaults(), maxRequest: 3 * time.Second})
	id := c.schedule(1, "bob", time.Now())[0]
	// Spent: the reaper took back more leases than the budget (three
	// retries) holds.
	if _, err := c.db.Exec(context.Background(),
		`UPDATE payments SET probe_first = true, retries = 4, attempt = 4 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	leaveCharge(t, c, id)
	c.startSweeper("sweeper-0")
	c.waitTerminal(30 * time.Second)
	time.Sleep(2 * time.Second) // the late charge has long been made
	if st, reason := c.status(id); st != "COMPLETED" {
		t.Fatalf("%s %s, want COMPLETED: the gateway holds its charge (report %v)", st, reason, c.report())
	}
	if r := c.report(); r.GetSucceeded() != 1 || r.GetLateRecords() != 1 {
		t.Fatalf("gateway report %v: want the one late charge", r)
	}
}

// An operator's resolve (FAILED: "not charged") and cancel of a dead
// letter whose last request may still be running at the gateway are
// refused ABSENCE_TOO_SOON, though the gateway proves it holds nothing
// yet: the late charge lands a moment later. Once the longest request has
// passed, the gateway's answer (the charge) refuses them for good.
func TestOperatorMovesWaitOutTheLongestRequest(t *testing.T) {
	c := newCluster(t, opts{noSweeper: true, faults: lateFaults(), maxRequest: 3 * time.Second})
	id := c.schedule(1, "bob", time.Now())[0]
	deadLetter(t, c, id)
	leaveCharge(t, c, id)
	adm := oneAdmin(admin.New(c.db, nil, c.charger(), quiet), c.db)
	actx := auth.WithPrincipal(context.Background(), auth.Principal{Actor: "ops", Admin: true})
	_, err := adm.ResolvePayment(actx, &payschedv1.ResolvePaymentRequest{PaymentId: id.String(), Note: "give up"})
	if status.Code(err) != codes.Unavailable || reasonOf(err) != "ABSENCE_TOO_SOON" {
		t.Fatalf("resolve while a request may still charge: %v, want UNAVAILABLE ABSENCE_TOO_SOON", err)
	}
	if _, err := adm.CancelPayment(actx, &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: "x"}); reasonOf(err) != "ABSENCE_TOO_SOON" {
		t.Fatalf("cancel while a request may still charge: %v, want ABSENCE_TOO_SOON", err)
	}
	time.Sleep(3 * time.Second)
	if _, err := adm.CancelPayment(actx, &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: "x"}); reasonOf(err) != "ALREADY_CHARGED" {
		t.Fatalf("cancel once the charge was made: %v, want ALREADY_CHARGED", err)
	}
	if st, _ := c.status(id); st != "DEAD_LETTERED" {
		t.Fatalf("status %s, want DEAD_LETTERED", st)
	}
}
