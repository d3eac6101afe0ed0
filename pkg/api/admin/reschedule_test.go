package admin_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/engine/fair"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

// TestRescheduleAndRunNowRaceClaims: operators push due payments an hour
// ahead, and bring half of those back (run now), while three sweepers
// claim. A reschedule that answered OK left its payment PENDING at attempt
// 0 and unclaimed until it was run now; one refused was claimed first; no
// payment is claimed twice.
func TestRescheduleAndRunNowRaceClaims(t *testing.T) {
	db := pgtest.NewPool(t)
	ids := duePayments(t, db, 300)
	srv, actx := adminServer(db)
	var mu sync.Mutex
	moved := map[uuid.UUID]bool{}
	runNow := map[uuid.UUID]bool{}
	claimed := map[uuid.UUID]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
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
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	later := timestamppb.New(time.Now().Add(time.Hour))
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := len(ids) - 1 - w; i >= 0; i -= 4 {
				resp, err := srv.ReschedulePayment(actx, &payschedv1.ReschedulePaymentRequest{PaymentId: ids[i].String(), RunAt: later, Note: "payroll moved"})
				once.Do(func() { close(started) })
				switch status.Code(err) {
				case codes.OK:
					if !resp.GetPayment().GetRunAt().AsTime().Equal(later.AsTime().Truncate(time.Microsecond)) {
						errs <- fmt.Errorf("rescheduled to %v, want %v", resp.GetPayment().GetRunAt().AsTime(), later.AsTime())
						return
					}
					mu.Lock()
					moved[ids[i]] = true
					mu.Unlock()
					if i%2 == 0 {
						if _, err := srv.RunPaymentNow(actx, &payschedv1.RunPaymentNowRequest{PaymentId: ids[i].String(), Note: "run it"}); err != nil {
							errs <- fmt.Errorf("run now %s: %w", ids[i], err)
							return
						}
						mu.Lock()
						runNow[ids[i]] = true
						mu.Unlock()
					}
				case codes.FailedPrecondition, codes.Aborted: // claimed first
				default:
					errs <- fmt.Errorf("reschedule %s: %w", ids[i], err)
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
	t.Logf("rescheduled %d (run now %d), claimed %d of %d", len(moved), len(runNow), len(claimed), len(ids))
	if len(moved) == 0 || len(runNow) == 0 {
		t.Fatal("no reschedule got in: the race was not run")
	}
	for _, id := range ids {
		var st string
		var attempt int
		var runAt time.Time
		if err := db.QueryRow(context.Background(), `SELECT status, attempt, run_at FROM payments WHERE id = $1`, id).Scan(&st, &attempt, &runAt); err != nil {
			t.Fatal(err)
		}
		switch {
		case claimed[id] > 1:
			t.Fatalf("%s claimed %d times", id, claimed[id])
		case moved[id] && !runNow[id] && (claimed[id] != 0 || st != "PENDING" || attempt != 0 || runAt.Before(time.Now().Add(50*time.Minute))):
			t.Fatalf("%s was rescheduled (OK) but is %s at attempt %d, runs at %v, claimed %d times", id, st, attempt, runAt, claimed[id])
		case !moved[id] && claimed[id] == 0 && st == "PENDING":
			// neither got to it: the sweepers stopped first
		case !moved[id] && claimed[id] != 1:
			t.Fatalf("%s was neither rescheduled nor claimed, and is %s", id, st)
		}
	}
	// What was run now is due again: claimed by the sweepers above or, if
	// it came due after they stopped, by the fair path (the earlier run_at
	// woke its tenant).
	sch, err := fair.New(fair.Config{}, db)
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Claimer{DB: db, Owner: "fair", Lease: time.Minute}
	got := map[uuid.UUID]bool{}
	for range 20 {
		cl, err := sch.Claim(context.Background(), c, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range cl {
			got[x.ID] = true
		}
	}
	for id := range runNow {
		if !got[id] && claimed[id] == 0 {
			t.Fatalf("%s was run now but no sweeper claimed it", id)
		}
	}
	for id := range moved {
		if !runNow[id] && got[id] {
			t.Fatalf("%s runs in an hour but was claimed", id)
		}
	}
}

// TestRescheduleRefusesWhatItMustNot: a reschedule before the due time or
// into the past, a run-now before the due time, either on a payment that
// is not open, or without a note, is refused with its reason; a HELD
// payment may be rescheduled but not run now.
func TestRescheduleRefusesWhatItMustNot(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	srv, actx := adminServer(db)
	due := time.Now().Add(time.Hour)
	future := uuid.New()
	if _, err := store.NewStore(db).Create(ctx, []store.NewPayment{{ID: future, Payer: "alice", Payee: "bob", Amount: 100,
		Currency: "USD", DueAt: due, CreatedAt: time.Now(), IdempotencyKey: "f", Tenant: "t"}}); err != nil {
		t.Fatal(err)
	}
	ids := duePayments(t, db, 2)
	if _, err := srv.HoldPayment(actx, &payschedv1.HoldPaymentRequest{PaymentId: ids[1].String(), Note: "stop"}); err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(time.Now().Add(d)) }
	for _, tc := range []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"before its due time", func() error {
			_, err := srv.ReschedulePayment(actx, &payschedv1.ReschedulePaymentRequest{PaymentId: future.String(), RunAt: at(30 * time.Minute), Note: "x"})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
		{"into the past", func() error {
			_, err := srv.ReschedulePayment(actx, &payschedv1.ReschedulePaymentRequest{PaymentId: ids[0].String(), RunAt: at(-time.Minute), Note: "x"})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
		{"a year ahead", func() error {
			_, err := srv.ReschedulePayment(actx, &payschedv1.ReschedulePaymentRequest{PaymentId: ids[0].String(), RunAt: at(365 * 24 * time.Hour), Note: "x"})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
		{"no time", func() error {
			_, err := srv.ReschedulePayment(actx, &payschedv1.ReschedulePaymentRequest{PaymentId: ids[0].String(), Note: "x"})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
		{"no note", func() error {
			_, err := srv.RunPaymentNow(actx, &payschedv1.RunPaymentNowRequest{PaymentId: ids[0].String()})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
		{"run now before its due time", func() error {
			_, err := srv.RunPaymentNow(actx, &payschedv1.RunPaymentNowRequest{PaymentId: future.String(), Note: "x"})
			return err
		}, codes.FailedPrecondition, "NOT_DUE_YET"},
		{"run now while HELD", func() error {
			_, err := srv.RunPaymentNow(actx, &payschedv1.RunPaymentNowRequest{PaymentId: ids[1].String(), Note: "x"})
			return err
		}, codes.FailedPrecondition, "NOT_PENDING"},
		{"a missing payment", func() error {
			_, err := srv.RunPaymentNow(actx, &payschedv1.RunPaymentNowRequest{PaymentId: uuid.NewString(), Note: "x"})
			return err
		}, codes.NotFound, apierr.ReasonNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != tc.code || apierr.Reason(err) != tc.reason {
				t.Fatalf("got %v (%s), want %v %s", status.Code(err), apierr.Reason(err), tc.code, tc.reason)
			}
		})
	}
	// A HELD payment is rescheduled and stays HELD; its action is audited.
	resp, err := srv.ReschedulePayment(actx, &payschedv1.ReschedulePaymentRequest{PaymentId: ids[1].String(), RunAt: at(2 * time.Hour), Note: "next run"})
	if err != nil || resp.GetPayment().GetStatus() != payschedv1.PaymentStatus_HELD {
		t.Fatalf("reschedule of a HELD payment: %v, %v", resp.GetPayment().GetStatus(), err)
	}
	var actor, action, prev, next, reason string
	if err := db.QueryRow(ctx, `SELECT actor, action, prev_status, new_status, reason FROM payment_actions
		WHERE payment_id = $1 ORDER BY id DESC LIMIT 1`, ids[1]).Scan(&actor, &action, &prev, &next, &reason); err != nil {
		t.Fatal(err)
	}
	if actor != "admin:ops" || action != "RESCHEDULE" || prev != "HELD" || next != "HELD" || len(reason) < len("next run (runs at ") {
		t.Fatalf("audited as %s %s %s>%s %q", actor, action, prev, next, reason)
	}
}
