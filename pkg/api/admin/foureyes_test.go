package admin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

// fourEyes is an admin service under policy p (the strict one when nil),
// its gateway proving every absence, and two admins' contexts.
type fourEyes struct {
	db       *pgxpool.Pool
	srv      *admin.Server
	ada, bea context.Context
}

func newFourEyes(t *testing.T, p *approval.Policy) *fourEyes {
	t.Helper()
	db := pgtest.NewPool(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := admin.New(db, nil, hookProber{}, quiet)
	if p != nil {
		var err error
		if srv.Requests, err = approval.New(db, *p, quiet); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	return &fourEyes{db: db, srv: srv,
		ada: auth.WithPrincipal(ctx, auth.Principal{Actor: "ada", Issuer: "idp", Admin: true}),
		bea: auth.WithPrincipal(ctx, auth.Principal{Actor: "bea", Issuer: "idp", Admin: true})}
}

// seed makes a payment of amount in status st (due a minute ago, claimed
// once unless PENDING), as the engine would have left it.
func (f *fourEyes) seed(t *testing.T, st payment.Status, amount int64) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id := uuid.New()
	if _, err := store.NewStore(f.db).Create(ctx, []store.NewPayment{{ID: id, Payer: "alice", Payee: "bob", Amount: amount,
		Currency: "EUR", DueAt: time.Now().Add(-time.Minute), CreatedAt: time.Now(), IdempotencyKey: id.String(), Tenant: "t"}}); err != nil {
		t.Fatal(err)
	}
	if st != payment.Pending {
		if _, err := f.db.Exec(ctx, `UPDATE payments SET status = $2, attempt = 1, probe_first = true WHERE id = $1`, id, string(st)); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// state is what a move would change.
func (f *fourEyes) state(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var s string
	if err := f.db.QueryRow(context.Background(), `SELECT status || ' ' || attempt || ' ' || run_at || ' ' || updated_at FROM payments WHERE id = $1`,
		id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEveryGuardedMethodMakesARequestAndMovesNothing: under the default
// (strict) policy, each method that moves money or changes a limit,
// called with one admin token, answers a request awaiting approval and
// moves nothing; a second admin's approval applies it.
func TestEveryGuardedMethodMakesARequestAndMovesNothing(t *testing.T) {
	f := newFourEyes(t, nil)
	inAnHour := timestamppb.New(time.Now().Add(time.Hour))
	for _, c := range []struct {
		name   string
		status payment.Status
		call   func(ctx context.Context, id string) (*payschedv1.OperatorRequest, error)
		after  payment.Status
	}{
		{"redrive", payment.DeadLettered, func(ctx context.Context, id string) (*payschedv1.OperatorRequest, error) {
			r, err := f.srv.RedrivePayment(ctx, &payschedv1.RedrivePaymentRequest{PaymentId: id, Note: "psp back"})
			return r.GetRequest(), err
		}, payment.Pending},
		{"resolve", payment.DeadLettered, func(ctx context.Context, id string) (*payschedv1.OperatorRequest, error) {
			r, err := f.srv.ResolvePayment(ctx, &payschedv1.ResolvePaymentRequest{PaymentId: id, Note: "never charged"})
			return r.GetRequest(), err
		}, payment.Failed},
		{"cancel a dead letter", payment.DeadLettered, func(ctx context.Context, id string) (*payschedv1.OperatorRequest, error) {
			r, err := f.srv.CancelPayment(ctx, &payschedv1.CancelPaymentRequest{PaymentId: id, Note: "customer asked"})
			return r.GetRequest(), err
		}, payment.Cancelled},
		{"cancel a pending payment", payment.Pending, func(ctx context.Context, id string) (*payschedv1.OperatorRequest, error) {
			r, err := f.srv.CancelPayment(ctx, &payschedv1.CancelPaymentRequest{PaymentId: id, Note: "customer asked"})
			return r.GetRequest(), err
		}, payment.Cancelled},
		{"release", payment.Held, func(ctx context.Context, id string) (*payschedv1.OperatorRequest, error) {
			r, err := f.srv.ReleasePayment(ctx, &payschedv1.ReleasePaymentRequest{PaymentId: id, Note: "checked"})
			return r.GetRequest(), err
		}, payment.Pending},
		{"reschedule", payment.Pending, func(ctx context.Context, id string) (*payschedv1.OperatorRequest, error) {
			r, err := f.srv.ReschedulePayment(ctx, &payschedv1.ReschedulePaymentRequest{PaymentId: id, RunAt: inAnHour, Note: "payroll moved"})
			return r.GetRequest(), err
		}, payment.Pending},
		{"run now", payment.Pending, func(ctx context.Context, id string) (*payschedv1.OperatorRequest, error) {
			r, err := f.srv.RunPaymentNow(ctx, &payschedv1.RunPaymentNowRequest{PaymentId: id, Note: "customer waiting"})
			return r.GetRequest(), err
		}, payment.Pending},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := f.seed(t, c.status, 500)
			if c.name == "run now" {
				// A payment waiting past its due time (a backoff).
				if _, err := f.db.Exec(context.Background(), `UPDATE payments SET run_at = now() + interval '1 hour' WHERE id = $1`, id); err != nil {
					t.Fatal(err)
				}
			}
			before := f.state(t, id)
			r, err := c.call(f.ada, id.String())
			if err != nil || r.GetState() != "AWAITING_APPROVAL" || !r.GetNeedsApproval() || r.GetRequestedBy() != "token:idp#ada" {
				t.Fatalf("one admin: %v %v, want a request awaiting approval", r, err)
			}
			if now := f.state(t, id); now != before {
				t.Fatalf("one admin moved it: %s, was %s", now, before)
			}
			// Not by the requester, even under another display name.
			renamed := auth.WithPrincipal(context.Background(), auth.Principal{Actor: "ada", Issuer: "idp", Name: "Bea", Admin: true})
			if _, err := f.srv.ApproveOperatorRequest(renamed, &payschedv1.ApproveOperatorRequestRequest{Name: r.GetName()}); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("own approval: %v, want PERMISSION_DENIED", err)
			}
			if now := f.state(t, id); now != before {
				t.Fatalf("own approval moved it: %s", now)
			}
			got, err := f.srv.ApproveOperatorRequest(f.bea, &payschedv1.ApproveOperatorRequestRequest{Name: r.GetName()})
			if err != nil || got.GetRequest().GetState() != "DONE" || got.GetRequest().GetDone() != 1 {
				t.Fatalf("second admin's approval: %v %v", got, err)
			}
			p, err := store.NewStore(f.db).GetAny(context.Background(), id)
			if err != nil || p.Status != c.after || f.state(t, id) == before {
				t.Fatalf("after approval: %v %v, want %s and changed", p, err, c.after)
			}
		})
	}
}

// TestAHoldIsOneAdminsUnderTheStrictPolicy: a hold stops money, it moves
// none: one admin may.
func TestAHoldIsOneAdminsUnderTheStrictPolicy(t *testing.T) {
	f := newFourEyes(t, nil)
	id := f.seed(t, payment.Pending, 500)
	r, err := f.srv.HoldPayment(f.ada, &payschedv1.HoldPaymentRequest{PaymentId: id.String(), Note: "wrong payroll"})
	if err != nil || r.GetRequest() != nil || r.GetPayment().GetStatus() != payschedv1.PaymentStatus_HELD {
		t.Fatalf("hold: %v %v", r, err)
	}
}

// TestSplittingAnActionAddsUp: under a policy that lets one admin release
// a payment below 1,000 alone, two releases of 600 each are counted
// together: the second waits for a second admin.
func TestSplittingAnActionAddsUp(t *testing.T) {
	p := approval.Strict()
	p.Single["RELEASE"] = true
	p.Amount = 1000
	f := newFourEyes(t, &p)
	a, b := f.seed(t, payment.Held, 600), f.seed(t, payment.Held, 600)
	r1, err := f.srv.ReleasePayment(f.ada, &payschedv1.ReleasePaymentRequest{PaymentId: a.String()})
	if err != nil || r1.GetRequest() != nil || r1.GetPayment().GetStatus() != payschedv1.PaymentStatus_PENDING {
		t.Fatalf("first release (600 of 1,000): %v %v, want done alone", r1, err)
	}
	r2, err := f.srv.ReleasePayment(f.ada, &payschedv1.ReleasePaymentRequest{PaymentId: b.String()})
	if err != nil || r2.GetRequest().GetState() != "AWAITING_APPROVAL" {
		t.Fatalf("second release (1,200 in all): %v %v, want a request awaiting approval", r2, err)
	}
	// Another admin's total is their own.
	r3, err := f.srv.ReleasePayment(f.bea, &payschedv1.ReleasePaymentRequest{PaymentId: b.String()})
	if err != nil || r3.GetRequest() != nil {
		t.Fatalf("bea's first release: %v %v, want done alone", r3, err)
	}
}

// TestAnApprovalAfterThePaymentMovedSkipsIt: the request pinned the dead
// letter at attempt 1; it was re-driven and dead-lettered again (attempt
// 2) before the approval, which skips it and says so.
func TestAnApprovalAfterThePaymentMovedSkipsIt(t *testing.T) {
	f := newFourEyes(t, nil)
	id := f.seed(t, payment.DeadLettered, 500)
	r, err := f.srv.RedrivePayment(f.ada, &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: "psp back"})
	if err != nil || r.GetRequest() == nil {
		t.Fatalf("redrive: %v %v", r, err)
	}
	if _, err := f.db.Exec(context.Background(), `UPDATE payments SET attempt = 2 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	before := f.state(t, id)
	got, err := f.srv.ApproveOperatorRequest(f.bea, &payschedv1.ApproveOperatorRequestRequest{Name: r.GetRequest().GetName()})
	if err != nil || got.GetRequest().GetSkipped() != 1 || got.GetRequest().GetDone() != 0 || len(got.GetRequest().GetErrors()) != 1 {
		t.Fatalf("approval: %v %v, want one skipped", got, err)
	}
	if now := f.state(t, id); now != before {
		t.Fatalf("the skipped payment moved: %s, was %s", now, before)
	}
}

// TestAnExpiredRequestDoesNothing: a request whose time ran out cannot be
// approved, and the runner closes it EXPIRED; one approved and then
// expired before it ran is not run.
func TestAnExpiredRequestDoesNothing(t *testing.T) {
	f := newFourEyes(t, nil)
	ctx := context.Background()
	id := f.seed(t, payment.Held, 500)
	before := f.state(t, id)
	expire := func(name string) {
		t.Helper()
		if _, err := f.db.Exec(ctx, `UPDATE console_requests SET expires_at = now() - interval '1 second' WHERE 'moves/' || id = $1`, name); err != nil {
			t.Fatal(err)
		}
	}
	r, err := f.srv.ReleasePayment(f.ada, &payschedv1.ReleasePaymentRequest{PaymentId: id.String()})
	if err != nil || r.GetRequest() == nil {
		t.Fatalf("release: %v %v", r, err)
	}
	expire(r.GetRequest().GetName())
	if _, err := f.srv.ApproveOperatorRequest(f.bea, &payschedv1.ApproveOperatorRequestRequest{Name: r.GetRequest().GetName()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("approving an expired request: %v, want FAILED_PRECONDITION", err)
	}
	if n, err := f.srv.Requests.Expire(ctx); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	got, err := f.srv.GetOperatorRequest(f.bea, &payschedv1.GetOperatorRequestRequest{Name: r.GetRequest().GetName()})
	if err != nil || got.GetRequest().GetState() != "EXPIRED" {
		t.Fatalf("after expiry: %v %v", got, err)
	}
	// Approved, then expired before a runner took it: not run.
	r2, err := f.srv.ReleasePayment(f.ada, &payschedv1.ReleasePaymentRequest{PaymentId: id.String()})
	if err != nil || r2.GetRequest() == nil {
		t.Fatalf("release: %v %v", r2, err)
	}
	var rid int64
	if _, err := f.db.Exec(ctx, `UPDATE console_requests SET state = 'APPROVED', decided_by = 'token:idp#bea', decided_name = 'bea', decided_at = now(),
		expires_at = now() - interval '1 second' WHERE 'moves/' || id = $1`, r2.GetRequest().GetName()); err != nil {
		t.Fatal(err)
	}
	if _, err := fmtSscan(r2.GetRequest().GetName(), &rid); err != nil {
		t.Fatal(err)
	}
	if run, err := f.srv.Requests.RunOne(ctx, rid, "test", admin.RequestActions{S: f.srv}); err != nil || run.State != "APPROVED" || run.Done != 0 {
		t.Fatalf("run of an expired approval: %+v %v", run, err)
	}
	if now := f.state(t, id); now != before {
		t.Fatalf("an expired request moved it: %s, was %s", now, before)
	}
}

// fmtSscan reads the id of "moves/<id>".
func fmtSscan(name string, id *int64) (int, error) { return fmt.Sscanf(name, "moves/%d", id) }
