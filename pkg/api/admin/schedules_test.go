package admin_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/store"
)

// TestAScheduleChangeTakesTwoAdmins: an operator's pause, resume or
// cancel of a payer's schedule is a request that changes nothing until a
// second identity approves it (never the requester, whatever their name);
// the planner then applies it, naming both in the schedule's event; one
// the schedule outran is NOT_APPLIED, and an expired one does nothing.
func TestAScheduleChangeTakesTwoAdmins(t *testing.T) {
	f := newFourEyes(t, nil)
	ctx := context.Background()
	now := time.Now()
	mk := func() uuid.UUID {
		t.Helper()
		next := now.AddDate(0, 1, 0)
		s := store.Schedule{ID: uuid.New(), Tenant: "t", Payer: "alice", Payee: "landlord", Amount: 1000, Currency: "EUR",
			Rule: "FREQ=MONTHLY", Start: next.UTC().Format("2006-01-02T15:04:05"), Zone: "UTC", MonthEnd: "CLAMP",
			BusinessDays: "NONE", CatchUp: "SKIP_MISSED", CatchUpBound: 12, NextAt: &next}
		if _, _, err := store.CreateSchedule(ctx, f.db, s); err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	p, err := planner.New(planner.Config{Horizon: 24 * time.Hour, Interval: time.Second, Batch: 10, Grace: time.Hour},
		f.db, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	pass := func() {
		t.Helper()
		if _, err := p.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	state := func(id uuid.UUID) store.ScheduleState {
		t.Helper()
		s, err := store.GetSchedule(ctx, f.db, "", id)
		if err != nil {
			t.Fatal(err)
		}
		return s.State
	}
	ask := func(who context.Context, id uuid.UUID, action string) *payschedv1.OperatorRequest {
		t.Helper()
		r, err := f.srv.RequestScheduleChange(who, &payschedv1.RequestScheduleChangeRequest{ScheduleId: id.String(), Action: action, Note: "payer asked by phone"})
		if err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		if r.GetRequest().GetState() != "AWAITING_APPROVAL" || !strings.HasPrefix(r.GetRequest().GetName(), "schedules/") {
			t.Fatalf("%s: %v", action, r.GetRequest())
		}
		return r.GetRequest()
	}
	read := func(name string) *payschedv1.OperatorRequest {
		t.Helper()
		r, err := f.srv.GetOperatorRequest(f.bea, &payschedv1.GetOperatorRequestRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetRequest()
	}

	a := mk()
	req := ask(f.ada, a, "PAUSE")
	pass()
	if state(a) != store.ScheduleActive {
		t.Fatal("a request nobody approved paused the schedule")
	}
	adaRenamed := auth.WithPrincipal(ctx, auth.Principal{Actor: "ada", Issuer: "idp", Name: "Ada Lovelace", Admin: true})
	for _, who := range []context.Context{f.ada, adaRenamed} {
		if _, err := f.srv.ApproveOperatorRequest(who, &payschedv1.ApproveOperatorRequestRequest{Name: req.GetName()}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("the requester approving their own request: %v, want PERMISSION_DENIED", err)
		}
	}
	if r, err := f.srv.ApproveOperatorRequest(f.bea, &payschedv1.ApproveOperatorRequestRequest{Name: req.GetName()}); err != nil || r.GetRequest().GetState() != "APPROVED" {
		t.Fatalf("bea's approval: %v %v", r, err)
	}
	pass()
	if state(a) != store.SchedulePaused || read(req.GetName()).GetState() != "APPLIED" {
		t.Fatalf("after the approval and a pass: %s, %v", state(a), read(req.GetName()))
	}
	var actor string
	if err := f.db.QueryRow(ctx, `SELECT actor FROM schedule_events WHERE schedule_id = $1 AND kind = 'PAUSED'`, a).Scan(&actor); err != nil ||
		actor != "admin:ada, approved by bea" {
		t.Fatalf("the pause's event names %q (%v)", actor, err)
	}

	// Bad asks are the client's mistakes.
	for _, c := range []struct {
		name string
		req  *payschedv1.RequestScheduleChangeRequest
		code codes.Code
	}{
		{"unknown action", &payschedv1.RequestScheduleChangeRequest{ScheduleId: a.String(), Action: "DELETE", Note: "x"}, codes.InvalidArgument},
		{"no note", &payschedv1.RequestScheduleChangeRequest{ScheduleId: a.String(), Action: "RESUME"}, codes.InvalidArgument},
		{"not a uuid", &payschedv1.RequestScheduleChangeRequest{ScheduleId: "x", Action: "RESUME", Note: "x"}, codes.InvalidArgument},
		{"a cancel's end", &payschedv1.RequestScheduleChangeRequest{ScheduleId: a.String(), Action: "CANCEL", Note: "x",
			ResumeAt: timestamppb.New(now.Add(time.Hour))}, codes.InvalidArgument},
		{"a pause of a paused one", &payschedv1.RequestScheduleChangeRequest{ScheduleId: a.String(), Action: "PAUSE", Note: "x"}, codes.FailedPrecondition},
		{"no such schedule", &payschedv1.RequestScheduleChangeRequest{ScheduleId: uuid.NewString(), Action: "PAUSE", Note: "x"}, codes.NotFound},
	} {
		if _, err := f.srv.RequestScheduleChange(f.ada, c.req); status.Code(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}

	// Approved, then outrun by the payer's own cancel: not applied.
	resume := ask(f.ada, a, "RESUME")
	if _, err := f.srv.ApproveOperatorRequest(f.bea, &payschedv1.ApproveOperatorRequestRequest{Name: resume.GetName()}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.CancelSchedule(ctx, f.db, now, "alice", a); err != nil {
		t.Fatal(err)
	}
	pass()
	if got := read(resume.GetName()); got.GetState() != "NOT_APPLIED" || !strings.Contains(got.GetError(), "CANCELLED") || state(a) != store.ScheduleCancelled {
		t.Fatalf("a resume the payer's cancel outran: %v, schedule %s", got, state(a))
	}

	// Approved and expired before a planner came: nothing.
	b := mk()
	cancel := ask(f.ada, b, "CANCEL")
	if _, err := f.srv.ApproveOperatorRequest(f.bea, &payschedv1.ApproveOperatorRequestRequest{Name: cancel.GetName()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Exec(ctx, `UPDATE schedule_requests SET expires_at = now() - interval '1 second' WHERE 'schedules/' || id = $1`, cancel.GetName()); err != nil {
		t.Fatal(err)
	}
	pass()
	if _, err := f.srv.Requests.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(cancel.GetName()); got.GetState() != "EXPIRED" || state(b) != store.ScheduleActive {
		t.Fatalf("an expired approval: %v, schedule %s", got, state(b))
	}
	list, err := f.srv.ListOperatorRequests(f.bea, &payschedv1.ListOperatorRequestsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range list.GetRequests() {
		if strings.HasPrefix(r.GetName(), "schedules/") {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d schedule requests listed, want 3", n)
	}
}
