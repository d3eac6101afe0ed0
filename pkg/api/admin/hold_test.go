package admin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/engine/fair"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

// duePayments creates n payments due a second from now and waits until
// they are due.
func duePayments(t *testing.T, db *pgxpool.Pool, n int) []uuid.UUID {
	t.Helper()
	due := time.Now().Add(time.Second)
	ps := make([]store.NewPayment, n)
	ids := make([]uuid.UUID, n)
	for i := range ps {
		ids[i] = uuid.New()
		ps[i] = store.NewPayment{ID: ids[i], Payer: "alice", Payee: "bob", Amount: 100, Currency: "USD", DueAt: due,
			CreatedAt: time.Now(), IdempotencyKey: fmt.Sprint("k", i), Tenant: "t"}
	}
	if _, err := store.NewStore(db).Create(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(due) + 50*time.Millisecond)
	return ids
}

func adminServer(db *pgxpool.Pool) (*admin.Server, context.Context) {
	srv := admin.New(db, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	relax(srv, db)
	return srv, auth.WithPrincipal(context.Background(), auth.Principal{Actor: "ops", Admin: true})
}

// relax lets one admin take every action alone, without bound
// (development's policy at its loosest): the tests of what a move does,
// apart from who may make it (foureyes_test.go).
func relax(srv *admin.Server, db *pgxpool.Pool) {
	p := approval.Strict()
	p.Count, p.Amount = 1<<30, 1<<50
	for a := range approval.Actions {
		p.Single[a] = true
	}
	var err error
	if srv.Requests, err = approval.New(db, p, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		panic(err)
	}
}

// TestHoldRacesClaims: operators hold due payments while three sweepers
// claim them. Each payment is held or claimed, never both: a hold that
// answered OK left the payment HELD and unclaimed, and no claim ever
// returned a payment once held.
func TestHoldRacesClaims(t *testing.T) {
	db := pgtest.NewPool(t)
	ids := duePayments(t, db, 300)
	srv, actx := adminServer(db)
	var mu sync.Mutex
	held := map[uuid.UUID]bool{}
	claimed := map[uuid.UUID]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	// The sweepers start once the first holds are answered: a claim is
	// quicker than a hold (which reads the payment first), and started
	// together the claims took every row before a hold read one.
	started := make(chan struct{})
	var once sync.Once
	for k := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-started
			c := &store.Claimer{DB: db, Owner: fmt.Sprint("sweeper-", k), Lease: time.Minute}
			for range 100 {
				got, err := c.Claim(context.Background(), 1)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, cl := range got {
					claimed[cl.ID]++
				}
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // a pace nearer a hold's

			}
		}()
	}
	// The holds go from the last created, the claims from the first: they
	// meet somewhere in the middle, where they race for the same rows.
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := len(ids) - 1 - w; i >= 0; i -= 4 {
				_, err := srv.HoldPayment(actx, &payschedv1.HoldPaymentRequest{PaymentId: ids[i].String(), Note: "wrong payroll"})
				once.Do(func() { close(started) })
				switch status.Code(err) {
				case codes.OK:
					mu.Lock()
					held[ids[i]] = true
					mu.Unlock()
				case codes.FailedPrecondition, codes.Aborted: // claimed first
				default:
					errs <- fmt.Errorf("hold %s: %w", ids[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	once.Do(func() { close(started) })
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("held %d, claimed %d of %d", len(held), len(claimed), len(ids))
	for _, id := range ids {
		var st string
		var attempt int
		if err := db.QueryRow(context.Background(), `SELECT status, attempt FROM payments WHERE id = $1`, id).Scan(&st, &attempt); err != nil {
			t.Fatal(err)
		}
		switch {
		case claimed[id] > 1:
			t.Fatalf("%s claimed %d times", id, claimed[id])
		case held[id] && (claimed[id] != 0 || st != "HELD" || attempt != 0):
			t.Fatalf("%s was held (OK) but is %s at attempt %d, claimed %d times", id, st, attempt, claimed[id])
		case !held[id] && st == "HELD":
			t.Fatalf("%s is HELD but its hold was refused", id)
		}
	}
}

// TestReleaseKeepsProbeFirstAndIsClaimedAgain: a held payment is skipped
// by the fair sweeper, a release puts it back in the tenants' queue as it
// was (probe_first untouched: a release adds no doubt), and a hold or a
// release of a payment in another status is refused.
func TestReleaseKeepsProbeFirstAndIsClaimedAgain(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	ids := duePayments(t, db, 2)
	if _, err := db.Exec(ctx, `UPDATE payments SET probe_first = true WHERE id = $1`, ids[1]); err != nil {
		t.Fatal(err)
	}
	srv, actx := adminServer(db)
	for _, id := range ids {
		if _, err := srv.HoldPayment(actx, &payschedv1.HoldPaymentRequest{PaymentId: id.String(), Note: "stop"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.HoldPayment(actx, &payschedv1.HoldPaymentRequest{PaymentId: ids[0].String(), Note: "again"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("hold of a HELD payment: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := srv.HoldPayment(actx, &payschedv1.HoldPaymentRequest{PaymentId: ids[0].String()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("hold without a note: %v, want INVALID_ARGUMENT", err)
	}
	sch, err := fair.New(fair.Config{}, db)
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Claimer{DB: db, Owner: "sweeper", Lease: time.Minute}
	if got, err := sch.Claim(ctx, c, 10); err != nil || len(got) != 0 {
		t.Fatalf("claimed %d held payments (%v)", len(got), err)
	}
	for _, id := range ids {
		resp, err := srv.ReleasePayment(actx, &payschedv1.ReleasePaymentRequest{PaymentId: id.String()})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetPayment().GetStatus() != payschedv1.PaymentStatus_PENDING {
			t.Fatalf("released to %v", resp.GetPayment().GetStatus())
		}
	}
	if _, err := srv.ReleasePayment(actx, &payschedv1.ReleasePaymentRequest{PaymentId: ids[0].String()}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("release of a PENDING payment: %v, want FAILED_PRECONDITION", err)
	}
	for i, want := range []bool{false, true} {
		var probe bool
		if err := db.QueryRow(ctx, `SELECT probe_first FROM payments WHERE id = $1`, ids[i]).Scan(&probe); err != nil {
			t.Fatal(err)
		}
		if probe != want {
			t.Fatalf("payment %d: probe_first %v after hold and release, want %v (as it was)", i, probe, want)
		}
	}
	got, err := sch.Claim(ctx, c, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("claimed %d of the 2 released (%v)", len(got), err)
	}
	if _, err := srv.HoldPayment(actx, &payschedv1.HoldPaymentRequest{PaymentId: ids[0].String(), Note: "too late"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("hold of a PROCESSING payment: %v, want FAILED_PRECONDITION", err)
	}
}
