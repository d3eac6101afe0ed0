package console

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
)

// absentProber answers every probe "proven absent": nothing the gateway
// says stops an action, so only the pin can.
type absentProber struct{}

func (absentProber) Probe(context.Context, gateway.ChargeInput) gateway.Result {
	return gateway.Result{Outcome: payment.Retryable, Absent: true}
}
func (absentProber) Cancel(context.Context, gateway.ChargeInput, string) gateway.Result {
	return gateway.Result{}
}

// newAdminHarness is a console acting through the real admin service.
func newAdminHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := newHarness(t, cfg)
	h.c.actions = admin.NewConsoleActions(admin.New(h.db, nil, absentProber{}, quiet))
	return h
}

// TestBulkActionSkipsPaymentsChangedSinceTheRequest: a bulk request pins
// its payments when it is requested; what the approver approves is those
// dead letters as they were. One re-driven since (PENDING at the same
// attempt), one re-driven and dead-lettered again (a later attempt) and
// one resolved are skipped and reported when it runs, not acted on; the
// unchanged one is. Each action is tried.
func TestBulkActionSkipsPaymentsChangedSinceTheRequest(t *testing.T) {
	for _, action := range []string{"CANCEL", "REDRIVE", "RESOLVE"} {
		t.Run(action, func(t *testing.T) {
			h := newAdminHarness(t, Config{Policy: relaxed(1 << 40)})
			ids := h.schedule(4, time.Now().Add(-time.Minute), 500)
			h.deadLetter(ids)
			ada, bea := h.as("ada", login.Admin), h.as("bea", login.Admin)
			rid := requestID(t, h.post(ada, "/console/requests", url.Values{"action": {action}, "reason": {"psp gone"},
				"scope": {"all"}, "count": {"4"}}))
			ctx := context.Background()
			redriven, again, resolved, same := ids[0], ids[1], ids[2], ids[3]
			for _, q := range []struct {
				sql string
				id  uuid.UUID
			}{
				{`UPDATE payments SET status = 'PENDING', probe_first = true, dead_letter_reason = NULL WHERE id = $1`, redriven},
				{`UPDATE payments SET attempt = 2, dead_letter_reason = 'AMBIGUOUS_UNRESOLVED' WHERE id = $1`, again},
				{`UPDATE payments SET status = 'FAILED', dead_letter_reason = NULL WHERE id = $1`, resolved},
			} {
				if _, err := h.db.Exec(ctx, q.sql, q.id); err != nil {
					t.Fatal(err)
				}
			}
			if rec := h.post(bea, fmt.Sprintf("/console/requests/%d/decide", rid), url.Values{"decision": {"approve"}}); rec.Code != 303 {
				t.Fatalf("approve: %d %s", rec.Code, rec.Body.String())
			}
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go h.runRequests(rctx)
			deadline := time.Now().Add(60 * time.Second)
			for h.requestState(rid).State != "DONE" {
				if time.Now().After(deadline) {
					t.Fatalf("request not done: %+v", h.requestState(rid))
				}
				time.Sleep(50 * time.Millisecond)
			}
			want := map[uuid.UUID]string{redriven: "PENDING", again: "DEAD_LETTERED", resolved: "FAILED",
				same: map[string]string{"CANCEL": "CANCELLED", "REDRIVE": "PENDING", "RESOLVE": "FAILED"}[action]}
			for id, st := range want {
				var got string
				var attempt int32
				if err := h.db.QueryRow(ctx, `SELECT status, attempt FROM payments WHERE id = $1`, id).Scan(&got, &attempt); err != nil {
					t.Fatal(err)
				}
				if got != st {
					t.Errorf("payment %s is %s (attempt %d), want %s", id, got, attempt, st)
				}
			}
			var acted int
			// Moves, that is: the request's own life is recorded on each
			// (REQUEST_REQUESTED, REQUEST_APPROVED).
			if err := h.db.QueryRow(ctx, `SELECT count(*) FROM payment_actions WHERE payment_id = ANY($1) AND action NOT LIKE 'REQUEST\_%'`,
				[]uuid.UUID{redriven, again, resolved}).Scan(&acted); err != nil || acted != 0 {
				t.Errorf("%d actions on payments changed since the request (%v), want none", acted, err)
			}
			r := h.requestState(rid)
			if r.Done != 1 {
				t.Errorf("request %+v: want 1 done", r)
			}
			page := h.get(bea, fmt.Sprintf("/console/requests/%d", rid)).Body.String()
			for _, id := range []uuid.UUID{redriven, again, resolved} {
				if !strings.Contains(page, id.String()+": skipped") {
					t.Errorf("the request page does not report %s as skipped", id)
				}
			}
			if !strings.Contains(page, "3 skipped") {
				t.Errorf("the request page does not count the skipped payments")
			}
		})
	}
}

// runUntilDone runs the console's requests until rid is DONE.
func (h *harness) runUntilDone(rid int64) *Request {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.runRequests(ctx)
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := h.requestState(rid)
		if r.State == "DONE" {
			return r
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("request not done: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHoldAndReleaseArePinnedAndApproved: holding three PENDING payments
// from the search page is one request a second operator approves; a
// payment claimed (and retried) since the request is skipped, not held;
// the held ones are released the same way, and only HELD ones are.
func TestHoldAndReleaseArePinnedAndApproved(t *testing.T) {
	h := newAdminHarness(t, Config{Policy: relaxed(1 << 40)})
	ctx := context.Background()
	ids := h.schedule(3, time.Now().Add(time.Hour), 500)
	ada, bea := h.as("ada", login.Admin), h.as("bea", login.Admin)
	form := url.Values{"action": {"HOLD"}, "reason": {"wrong payroll"}, "scope": {"selected"}, "count": {"3"}}
	for _, id := range ids {
		form.Add("id", id.String())
	}
	if rec := h.post(ada, "/console/payments/preview", form); rec.Code != 200 || !strings.Contains(rec.Body.String(), "<strong>3</strong> payments") {
		t.Fatalf("preview: %d %s", rec.Code, rec.Body.String())
	}
	rid := requestID(t, h.post(ada, "/console/requests", form))
	if r := h.requestState(rid); r.State != "AWAITING_APPROVAL" {
		t.Fatalf("a hold of 3 is %s, want AWAITING_APPROVAL", r.State)
	}
	// Claimed and retried since: PENDING again, at a later attempt.
	if _, err := h.db.Exec(ctx, `UPDATE payments SET attempt = 1, probe_first = true WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if rec := h.post(bea, fmt.Sprintf("/console/requests/%d/decide", rid), url.Values{"decision": {"approve"}}); rec.Code != 303 {
		t.Fatalf("approve: %d %s", rec.Code, rec.Body.String())
	}
	if r := h.runUntilDone(rid); r.Done != 2 || r.Skipped != 1 {
		t.Fatalf("hold request %+v: want 2 done, 1 skipped", r)
	}
	want := map[uuid.UUID]string{ids[0]: "PENDING", ids[1]: "HELD", ids[2]: "HELD"}
	for id, st := range want {
		var got string
		if err := h.db.QueryRow(ctx, `SELECT status FROM payments WHERE id = $1`, id).Scan(&got); err != nil || got != st {
			t.Fatalf("%s is %s (%v), want %s", id, got, err, st)
		}
	}
	// Release all three ticked: only the two HELD are selected.
	form.Set("action", "RELEASE")
	form.Set("count", "2")
	rid = requestID(t, h.post(ada, "/console/requests", form))
	if rec := h.post(bea, fmt.Sprintf("/console/requests/%d/decide", rid), url.Values{"decision": {"approve"}}); rec.Code != 303 {
		t.Fatalf("approve: %d %s", rec.Code, rec.Body.String())
	}
	if r := h.runUntilDone(rid); r.Done != 2 {
		t.Fatalf("release request %+v: want 2 done", r)
	}
	var pending int
	if err := h.db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE id = ANY($1) AND status = 'PENDING'`, ids).Scan(&pending); err != nil || pending != 3 {
		t.Fatalf("%d of 3 PENDING after the release (%v)", pending, err)
	}
	// The payment page offers the actions of its status.
	page := h.get(ada, "/console/payments/"+ids[1].String()).Body.String()
	if !strings.Contains(page, `value="HOLD"`) || strings.Contains(page, `value="REDRIVE"`) {
		t.Fatalf("a PENDING payment's page does not offer hold (or offers re-drive)")
	}
}

// TestActionsPageListsEveryOperatorsMoves: the actions page lists the
// moves of payctl (admin:ops) and of the console (admin:console:…) in one
// list, newest first, filtered by actor and action.
func TestActionsPageListsEveryOperatorsMoves(t *testing.T) {
	h := newAdminHarness(t, Config{Policy: relaxed(1 << 40)})
	ctx := context.Background()
	ids := h.schedule(2, time.Now().Add(time.Hour), 500)
	for i, actor := range []string{"admin:ops", "admin:console:ada"} {
		if _, err := h.db.Exec(ctx, `INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason)
			VALUES ($1, $2, 'HOLD', 'PENDING', 'HELD', 'wrong payroll')`, ids[i], actor); err != nil {
			t.Fatal(err)
		}
	}
	vic := h.as("vic", login.Viewer)
	page := h.get(vic, "/console/actions").Body.String()
	if !strings.Contains(page, "admin:ops") || !strings.Contains(page, "admin:console:ada") {
		t.Fatalf("the actions page does not list both:\n%s", page)
	}
	if strings.Index(page, "admin:console:ada") > strings.Index(page, "admin:ops") {
		t.Fatal("not newest first")
	}
	page = h.get(vic, "/console/actions?actor=admin:console:").Body.String()
	if strings.Contains(page, ">admin:ops<") || !strings.Contains(page, "admin:console:ada") {
		t.Fatalf("the actor filter does not filter:\n%s", page)
	}
	if page := h.get(vic, "/console/actions?action=REDRIVE").Body.String(); strings.Contains(page, ids[0].String()) {
		t.Fatal("the action filter does not filter")
	}
	if rec := h.get(vic, "/console/actions?since=yesterday"); rec.Code != 400 {
		t.Fatalf("a bad date: %d", rec.Code)
	}
}

// TestRescheduleAndRunNowArePinnedAndApproved: rescheduling three PENDING
// payments is one request a second operator approves, carrying its new run
// time; a payment claimed since is skipped; a run-now of one brings it
// back; a reschedule without a time, or into the past, is refused.
func TestRescheduleAndRunNowArePinnedAndApproved(t *testing.T) {
	h := newAdminHarness(t, Config{Policy: relaxed(1 << 40)})
	ctx := context.Background()
	due := time.Now().Add(time.Second)
	ids := h.schedule(3, due, 500)
	time.Sleep(time.Until(due))
	ada, bea := h.as("ada", login.Admin), h.as("bea", login.Admin)
	runAt := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
	form := url.Values{"action": {"RESCHEDULE"}, "reason": {"payroll moved"}, "scope": {"selected"}, "count": {"3"},
		"runAt": {runAt.Format(dateForm)}}
	for _, id := range ids {
		form.Add("id", id.String())
	}
	for _, bad := range []string{"", "tomorrow", time.Now().UTC().Add(-time.Hour).Format(dateForm)} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		f.Set("runAt", bad)
		if rec := h.post(ada, "/console/payments/preview", f); rec.Code != 400 {
			t.Fatalf("a reschedule to %q: %d, want 400", bad, rec.Code)
		}
	}
	rec := h.post(ada, "/console/payments/preview", form)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "<strong>3</strong> payments") ||
		!strings.Contains(rec.Body.String(), "To run at <strong>"+runAt.Format(time.DateTime)) {
		t.Fatalf("preview: %d %s", rec.Code, rec.Body.String())
	}
	rid := requestID(t, h.post(ada, "/console/requests", form))
	if r := h.requestState(rid); r.State != "AWAITING_APPROVAL" || r.RunAt == nil || !r.RunAt.Equal(runAt) {
		t.Fatalf("a reschedule of 3 is %s to run at %v, want AWAITING_APPROVAL at %v", r.State, r.RunAt, runAt)
	}
	if _, err := h.db.Exec(ctx, `UPDATE payments SET attempt = 1, probe_first = true WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if rec := h.post(bea, fmt.Sprintf("/console/requests/%d/decide", rid), url.Values{"decision": {"approve"}}); rec.Code != 303 {
		t.Fatalf("approve: %d %s", rec.Code, rec.Body.String())
	}
	if r := h.runUntilDone(rid); r.Done != 2 || r.Skipped != 1 {
		t.Fatalf("reschedule request %+v: want 2 done, 1 skipped", r)
	}
	runsAt := func(id uuid.UUID) time.Time {
		var at time.Time
		if err := h.db.QueryRow(ctx, `SELECT run_at FROM payments WHERE id = $1 AND status = 'PENDING'`, id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	if at := runsAt(ids[0]); at.After(time.Now()) {
		t.Fatalf("the skipped payment was rescheduled to %v", at)
	}
	for _, id := range ids[1:] {
		if at := runsAt(id); !at.Equal(runAt) {
			t.Fatalf("%s runs at %v, want %v", id, at, runAt)
		}
	}
	if page := h.get(ada, "/console/payments/"+ids[1].String()).Body.String(); !strings.Contains(page, `id="runs-at"`) {
		t.Fatal("the payment page does not show its new run time")
	}
	// Run one now: one payment, within the thresholds, runs unapproved.
	rid = requestID(t, h.post(ada, "/console/payments/"+ids[1].String()+"/action", url.Values{"action": {"RUN_NOW"}, "reason": {"back on"}}))
	if r := h.runUntilDone(rid); r.Done != 1 {
		t.Fatalf("run-now request %+v: want 1 done", r)
	}
	if at := runsAt(ids[1]); at.After(time.Now()) {
		t.Fatalf("run now left it to run at %v", at)
	}
}
