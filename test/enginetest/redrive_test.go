package enginetest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/approval"
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
	// No sweeper until the payment is parked: the engine has not touched it.
	c := newCluster(t, opts{noSweeper: true, faults: &gatewayv1.Faults{KeyRetentionMs: 1}})
	id := c.schedule(1, "bob", time.Now())[0]
	ctx := context.Background()
	ch, err := c.sim.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: id.String(), Reference: id.String(),
		Amount: 100, Currency: "USD", Payer: "alice", Payee: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	deadLetter(t, c, id)
	adm := oneAdmin(admin.New(c.db, nil, c.charger(), quiet), c.db)
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	_, err = adm.RedrivePayment(actx, &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: "retry"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), ch.GetCharge().GetChargeId()) {
		t.Fatalf("re-drive of a charged payment: %v, want FAILED_PRECONDITION naming %s", err, ch.GetCharge().GetChargeId())
	}
	_, err = adm.ResolvePayment(actx, &payschedv1.ResolvePaymentRequest{PaymentId: id.String(), Note: "give up"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("resolve of a charged payment: %v, want FAILED_PRECONDITION", err)
	}
	c.startSweeper("sweeper-0")
	time.Sleep(time.Second) // due: an engine that took it would charge it
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
	c := newCluster(t, opts{noSweeper: true})
	id := c.schedule(1, "bob", time.Now())[0]
	ctx := context.Background()
	deadLetter(t, c, id)
	adm := oneAdmin(admin.New(c.db, nil, c.charger(), quiet), c.db)
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	if _, err := adm.RedrivePayment(actx, &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: "retry"}); err != nil {
		t.Fatal(err)
	}
	c.startSweeper("sweeper-0")
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

// reasonOf is the ErrorInfo reason of a gRPC error.
func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// An operator's resolve (to FAILED: "not charged") and re-drive need the
// gateway to prove it holds no charge. A gateway whose lookup lags (a
// charge made a moment ago is invisible to it) is not proof: refused with
// ABSENCE_UNPROVEN, the payment left where it is, here rightly so, for it
// was charged.
func TestResolveNeedsAProvenAbsence(t *testing.T) {
	c := newCluster(t, opts{noSweeper: true, faults: &gatewayv1.Faults{ProbeLagMs: 60_000, ProbeUnprovenRate: 1}})
	id := c.schedule(1, "bob", time.Now())[0]
	ctx := context.Background()
	if _, err := c.sim.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: id.String(), Reference: id.String(),
		Amount: 100, Currency: "USD", Payer: "alice", Payee: "bob"}); err != nil {
		t.Fatal(err)
	}
	deadLetter(t, c, id)
	adm := oneAdmin(admin.New(c.db, nil, c.charger(), quiet), c.db)
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	_, err := adm.ResolvePayment(actx, &payschedv1.ResolvePaymentRequest{PaymentId: id.String(), Note: "give up"})
	if status.Code(err) != codes.Unavailable || reasonOf(err) != "ABSENCE_UNPROVEN" {
		t.Fatalf("resolve on an unproven absence: %v, want UNAVAILABLE ABSENCE_UNPROVEN", err)
	}
	_, err = adm.RedrivePayment(actx, &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: "retry"})
	if reasonOf(err) != "ABSENCE_UNPROVEN" {
		t.Fatalf("re-drive on an unproven absence: %v", err)
	}
	if st, _ := c.status(id); st != "DEAD_LETTERED" {
		t.Fatalf("status %s", st)
	}
}

// An operator cancels a payment at rest whose charge waits for the
// customer's authentication: the charge is cancelled at the gateway
// first, then the payment is CANCELLED, both names in the audit. One the
// gateway charged is refused; one a claim took meanwhile is fenced.
func TestOperatorCancel(t *testing.T) {
	c := newCluster(t, opts{noSweeper: true})
	ctx := context.Background()
	adm := oneAdmin(admin.New(c.db, nil, c.charger(), quiet), c.db)
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	ids := c.schedule(3, "bob", time.Now())
	waiting, charged, never := ids[0], ids[1], ids[2]
	c.setFaults(&gatewayv1.Faults{ActionRequiredRate: 1})
	for i, id := range []uuid.UUID{waiting, charged} {
		if i == 1 {
			c.setFaults(&gatewayv1.Faults{})
		}
		if _, err := c.sim.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: id.String(), Reference: id.String(),
			Amount: 100 + int64(i), Currency: "USD", Payer: "alice", Payee: "bob" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		deadLetter(t, c, id)
	}
	got, err := adm.CancelPayment(actx, &payschedv1.CancelPaymentRequest{PaymentId: waiting.String(), Note: "customer never authenticated"})
	if err != nil || got.GetPayment().GetStatus() != payschedv1.PaymentStatus_CANCELLED || got.GetCancelledChargeId() == "" {
		t.Fatalf("cancel of a payment awaiting authentication: %v %v", got, err)
	}
	ch, _ := c.sim.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: waiting.String()})
	if ch.GetCharge().GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED {
		t.Fatalf("the gateway still holds %v", ch.GetCharge())
	}
	if _, err := adm.CancelPayment(actx, &payschedv1.CancelPaymentRequest{PaymentId: charged.String(), Note: "x"}); reasonOf(err) != "ALREADY_CHARGED" {
		t.Fatalf("cancel of a charged payment: %v", err)
	}
	if _, err := adm.CancelPayment(actx, &payschedv1.CancelPaymentRequest{PaymentId: never.String(), Note: "duplicate order"}); err != nil {
		t.Fatalf("cancel of a never-charged dead letter: %v", err)
	}
	var actor, action string
	if err := c.db.QueryRow(ctx, `SELECT actor, action FROM payment_actions WHERE payment_id = $1 AND action NOT LIKE 'REQUEST\_%'`, waiting).Scan(&actor, &action); err != nil ||
		actor != "admin:ops" || action != "CANCEL" {
		t.Fatalf("audit: %s %s %v", actor, action, err)
	}
	c.startSweeper("sweeper-0")
	time.Sleep(time.Second) // due: nothing charges a cancelled payment
	for _, id := range []uuid.UUID{waiting, never} {
		if st, _ := c.status(id); st != "CANCELLED" {
			t.Fatalf("%s: %s", id, st)
		}
	}
	if r := c.report(); r.GetSucceeded() != 1 {
		t.Fatalf("report %v", r)
	}
}

// oneAdmin lets one admin take every action alone (development's loosest
// policy): these tests are about what the gateway lets a move do, not who
// may make it (pkg/api/admin's foureyes_test.go).
func oneAdmin(srv *admin.Server, db *pgxpool.Pool) *admin.Server {
	p := approval.Strict()
	p.Count, p.Amount = 1<<30, 1<<50
	for a := range approval.Actions {
		p.Single[a] = true
	}
	var err error
	if srv.Requests, err = approval.New(db, p, quiet); err != nil {
		panic(err)
	}
	return srv
}
