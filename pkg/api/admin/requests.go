package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/payment"
)

// Four eyes on the API: every method that moves a payment or changes a
// tenant's limits makes a request (package approval). What the policy
// lets one admin do alone is applied at once, through the same runner a
// second admin's approval goes through; the rest answers the request,
// awaiting approval, and moves nothing.

// identity is the calling admin as four eyes compare them: the token's
// issuer and subject (never its name, which is only shown).
func identity(ctx context.Context) (approval.Identity, error) {
	if _, err := admin(ctx); err != nil {
		return approval.Identity{}, err
	}
	p, _ := auth.FromContext(ctx)
	name := p.Name
	if name == "" {
		name = p.Actor
	}
	return approval.Identity{Operator: "token:" + p.Issuer + "#" + p.Actor, Name: name}, nil
}

// ask is an admin's action on one payment, as the API received it.
type ask struct {
	// action is the request's: REDRIVE, RESOLVE, HOLD, RELEASE,
	// RESCHEDULE, RUN_NOW, or CANCEL (made CANCEL_PENDING or CANCEL_HELD
	// by the payment's status).
	action       string
	paymentID    string
	note         string
	noteRequired bool
	// runAt is a RESCHEDULE's new run time.
	runAt time.Time
}

// asked is what became of an ask: a request awaiting approval, or the
// payment after the move and the status it left.
type asked struct {
	request *payschedv1.OperatorRequest
	payment *payschedv1.ScheduledPayment
	prev    payschedv1.PaymentStatus
	// cancelled is the gateway's charge a cancel cancelled on the way.
	cancelled string
}

// notIn is the refusal of an action on a payment in another status.
func notIn(want []payment.Status, p *payment.Payment) error {
	names := make([]string, len(want))
	for i, st := range want {
		names[i] = string(st)
	}
	reason := "NOT_" + string(want[0])
	if len(want) > 1 {
		reason = "NOT_AT_REST"
	}
	return apierr.New(codes.FailedPrecondition, reason,
		"only a payment that is "+strings.Join(names, " or ")+" can be moved so; this one is "+string(p.Status),
		map[string]string{"status": string(p.Status)})
}

// guard makes a as a request on the payment as it is now (its status and
// attempt pinned), after the checks a move would make, so a mistake is
// answered at once and never waits for an approver.
func (s *Server) guard(ctx context.Context, a ask) (asked, error) {
	who, err := identity(ctx)
	if err != nil {
		return asked{}, err
	}
	id, err := apierr.ParseID("paymentId", a.paymentID)
	if err != nil {
		return asked{}, err
	}
	if err := checkNote(a.note, a.noteRequired); err != nil {
		return asked{}, err
	}
	now := time.Now()
	if a.action == "RESCHEDULE" {
		if err := checkRunAt(a.runAt, now); err != nil {
			return asked{}, err
		}
	}
	p, err := s.readPayment(ctx, id, nil)
	if err != nil {
		return asked{}, err
	}
	action := a.action
	switch action {
	case "CANCEL":
		switch p.Status {
		case payment.DeadLettered:
		case payment.Pending:
			action = "CANCEL_PENDING"
		case payment.Held:
			action = "CANCEL_HELD"
		default:
			return asked{}, notIn([]payment.Status{payment.DeadLettered, payment.Pending, payment.Held}, p)
		}
	case "RESCHEDULE":
		if p.Status != payment.Pending && p.Status != payment.Held {
			return asked{}, apierr.New(codes.FailedPrecondition, "NOT_PENDING",
				"only a PENDING or HELD payment can be rescheduled; this one is "+string(p.Status), map[string]string{"status": string(p.Status)})
		}
		if a.runAt.Before(p.DueAt) {
			return asked{}, invalid("runAt", "must not be before the payment's due time, "+p.DueAt.Format(time.RFC3339))
		}
	default:
		if want := approval.Actions[action]; p.Status != want {
			if want == payment.DeadLettered {
				return asked{}, apierr.New(codes.FailedPrecondition, "NOT_DEAD_LETTERED",
					"only a payment that is DEAD_LETTERED can be moved so; this one is "+string(p.Status), map[string]string{"status": string(p.Status)})
			}
			return asked{}, notIn([]payment.Status{want}, p)
		}
		if action == "RUN_NOW" && p.DueAt.After(now) {
			// The due time is the instant its client asked for: never an
			// operator's to bring forward.
			return asked{}, apierr.New(codes.FailedPrecondition, "NOT_DUE_YET",
				"the payment is due at "+p.DueAt.Format(time.RFC3339)+": it never runs before its due time",
				map[string]string{"dueAt": p.DueAt.Format(time.RFC3339)})
		}
	}
	var sel approval.Selection
	sel.Add(id, p.Attempt, p.Amount, p.Currency)
	reason := strings.TrimSpace(a.note)
	if reason == "" {
		reason = "(no note)"
	}
	var runAt *time.Time
	if action == "RESCHEDULE" {
		runAt = &a.runAt
	}
	rid, need, err := s.Requests.Create(ctx, approval.NewRequest{Action: action, Filter: "payment " + id.String(), Reason: reason,
		RunAt: runAt, Who: who, Sel: sel, Via: "api"})
	if err != nil {
		return asked{}, s.internal("request", err)
	}
	if need {
		r, err := s.Requests.Get(ctx, rid)
		if err != nil {
			return asked{}, s.internal("read request", err)
		}
		s.log.Info("admin action awaits approval", "request", rid, "actor", who.Name, "action", action, "payment", id)
		return asked{request: RequestToProto(r)}, nil
	}
	var cancelled string
	_, err = s.Requests.RunOne(withCancelled(ctx, &cancelled), rid, s.Process, RequestActions{S: s})
	if apierr.Reason(err) == apierr.ReasonChangedSinceRequest {
		// Pinned a moment ago: a claim (or another operator) moved it
		// in between.
		now, gerr := s.store.GetAny(ctx, id)
		if gerr != nil {
			return asked{}, s.internal("read payment", gerr)
		}
		return asked{}, movedMeanwhile("meanwhile", now)
	}
	if err != nil {
		return asked{}, err
	}
	out, err := s.store.GetAny(ctx, id)
	if err != nil {
		return asked{}, s.internal("read payment", err)
	}
	return asked{payment: payments.ToProto(out), prev: payments.StatusToProto(p.Status), cancelled: cancelled}, nil
}

type cancelledKey struct{}

// withCancelled is ctx where a cancel notes the gateway charge it
// cancelled on the way.
func withCancelled(ctx context.Context, ref *string) context.Context {
	return context.WithValue(ctx, cancelledKey{}, ref)
}

func noteCancelled(ctx context.Context, ref string) {
	if p, ok := ctx.Value(cancelledKey{}).(*string); ok && ref != "" {
		*p = ref
	}
}

// requestName parses "moves/<id>", "limits/<id>", "endpoints/<id>" or
// "schedules/<id>".
func requestName(name string) (kind string, id int64, err error) {
	kind, n, ok := strings.Cut(name, "/")
	if ok && (kind == "moves" || kind == "limits" || kind == "endpoints" || kind == "schedules") {
		if id, err = strconv.ParseInt(n, 10, 64); err == nil && id > 0 {
			return kind, id, nil
		}
	}
	return "", 0, invalid("name", `must be "moves/<id>", "limits/<id>", "endpoints/<id>" or "schedules/<id>"`)
}

func (s *Server) requestErr(err error) error {
	switch {
	case errors.Is(err, approval.ErrNotFound):
		return apierr.New(codes.NotFound, apierr.ReasonNotFound, "request not found", nil)
	case errors.Is(err, approval.ErrOwnRequest):
		return apierr.New(codes.PermissionDenied, "OWN_REQUEST",
			"it is your own request (the same issuer and subject, whatever the name): a second admin must decide", nil)
	case errors.Is(err, approval.ErrNotAwaiting):
		return apierr.New(codes.FailedPrecondition, "NOT_AWAITING_APPROVAL", "the request is not awaiting approval: decided already, or expired", nil)
	}
	return s.internal("request", err)
}

// ListOperatorRequests implements AdminService.
func (s *Server) ListOperatorRequests(ctx context.Context, req *payschedv1.ListOperatorRequestsRequest) (*payschedv1.ListOperatorRequestsResponse, error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	moves, err := s.Requests.List(ctx)
	if err != nil {
		return nil, s.internal("list requests", err)
	}
	limits, err := s.Requests.ListLimits(ctx)
	if err != nil {
		return nil, s.internal("list limit requests", err)
	}
	out := &payschedv1.ListOperatorRequestsResponse{}
	for _, r := range moves {
		if req.GetState() == "" || r.State == req.GetState() {
			out.Requests = append(out.Requests, RequestToProto(r))
		}
	}
	for _, l := range limits {
		if req.GetState() == "" || l.State == req.GetState() {
			out.Requests = append(out.Requests, limitToProto(l))
		}
	}
	eps, err := s.Requests.ListEndpoints(ctx)
	if err != nil {
		return nil, s.internal("list endpoint requests", err)
	}
	for _, e := range eps {
		if req.GetState() == "" || e.State == req.GetState() {
			out.Requests = append(out.Requests, endpointToProto(e, ""))
		}
	}
	scheds, err := s.Requests.ListScheduleRequests(ctx, uuid.Nil)
	if err != nil {
		return nil, s.internal("list schedule requests", err)
	}
	for _, r := range scheds {
		if req.GetState() == "" || r.State == req.GetState() {
			out.Requests = append(out.Requests, scheduleRequestToProto(r))
		}
	}
	return out, nil
}

// GetOperatorRequest implements AdminService.
func (s *Server) GetOperatorRequest(ctx context.Context, req *payschedv1.GetOperatorRequestRequest) (*payschedv1.GetOperatorRequestResponse, error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	r, err := s.readRequest(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return &payschedv1.GetOperatorRequestResponse{Request: r}, nil
}

func (s *Server) readRequest(ctx context.Context, name string) (*payschedv1.OperatorRequest, error) {
	kind, id, err := requestName(name)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "limits":
		l, err := s.Requests.GetLimits(ctx, id)
		if err != nil {
			return nil, s.requestErr(err)
		}
		return limitToProto(l), nil
	case "endpoints":
		e, err := s.Requests.GetEndpoint(ctx, id)
		if err != nil {
			return nil, s.requestErr(err)
		}
		return endpointToProto(e, ""), nil
	case "schedules":
		r, err := s.Requests.GetScheduleRequest(ctx, id)
		if err != nil {
			return nil, s.requestErr(err)
		}
		return scheduleRequestToProto(r), nil
	}
	r, err := s.Requests.Get(ctx, id)
	if err != nil {
		return nil, s.requestErr(err)
	}
	return RequestToProto(r), nil
}

// decide approves or rejects the named request as the calling admin; an
// approved request on one payment is applied before the answer (a larger
// one by the background runner).
func (s *Server) decide(ctx context.Context, name string, approve bool) (*payschedv1.OperatorRequest, error) {
	who, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	kind, id, err := requestName(name)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "limits":
		if err := s.Requests.DecideLimits(ctx, id, "", approve, who); err != nil {
			return nil, s.requestErr(err)
		}
		return s.readRequest(ctx, name)
	case "endpoints":
		e, secret, err := s.Requests.DecideEndpoint(ctx, id, approve, who, approval.ApplyEndpoint(s.hooksDB()))
		if e == nil {
			return nil, s.requestErr(err)
		}
		if err != nil {
			// Decided, and its application failed: the request says why.
			s.log.Warn("endpoint request failed", "request", id, "err", err)
		}
		return endpointToProto(e, secret), nil
	case "schedules":
		// Approved, payments-api's planner applies it at its next pass.
		if err := s.Requests.DecideSchedule(ctx, id, approve, who); err != nil {
			return nil, s.requestErr(err)
		}
		return s.readRequest(ctx, name)
	}
	if err := s.Requests.Decide(ctx, id, approve, who); err != nil {
		return nil, s.requestErr(err)
	}
	if approve {
		if r, err := s.Requests.Get(ctx, id); err == nil && len(r.IDs) == 1 {
			// Its outcome (a refusal, a skip) is the request's to show.
			_, _ = s.Requests.RunOne(ctx, id, s.Process, RequestActions{S: s})
		}
	}
	return s.readRequest(ctx, name)
}

// ApproveOperatorRequest implements AdminService.
func (s *Server) ApproveOperatorRequest(ctx context.Context, req *payschedv1.ApproveOperatorRequestRequest) (*payschedv1.ApproveOperatorRequestResponse, error) {
	r, err := s.decide(ctx, req.GetName(), true)
	if err != nil {
		return nil, err
	}
	return &payschedv1.ApproveOperatorRequestResponse{Request: r}, nil
}

// RejectOperatorRequest implements AdminService.
func (s *Server) RejectOperatorRequest(ctx context.Context, req *payschedv1.RejectOperatorRequestRequest) (*payschedv1.RejectOperatorRequestResponse, error) {
	r, err := s.decide(ctx, req.GetName(), false)
	if err != nil {
		return nil, err
	}
	return &payschedv1.RejectOperatorRequestResponse{Request: r}, nil
}

func ts(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// RequestToProto is the API form of a request on payments.
func RequestToProto(r *approval.Request) *payschedv1.OperatorRequest {
	out := &payschedv1.OperatorRequest{Name: fmt.Sprintf("moves/%d", r.ID), Action: r.Action, State: r.State,
		PaymentCount: int32(len(r.IDs)), RunAt: ts(r.RunAt), Reason: r.Reason, RequestedBy: r.RequestedBy, RequestedName: r.RequestedName,
		RequestedAt: timestamppb.New(r.RequestedAt), NeedsApproval: r.NeedsApproval, DecidedBy: r.DecidedBy, DecidedName: r.DecidedName,
		DecidedAt: ts(r.DecidedAt), ExpiresAt: ts(r.ExpiresAt), Done: int32(r.Done), Failed: int32(r.Failed), Skipped: int32(r.Skipped),
		Errors: r.Errors, Via: r.Via}
	for i, id := range r.IDs {
		if i == 100 {
			break
		}
		out.PaymentIds = append(out.PaymentIds, id.String())
		out.Attempts = append(out.Attempts, r.Pin(i))
	}
	curs := make([]string, 0, len(r.Amounts))
	for c := range r.Amounts {
		curs = append(curs, c)
	}
	sort.Strings(curs)
	for _, c := range curs {
		out.Amounts = append(out.Amounts, &payschedv1.CurrencyAmount{Currency: c, Total: r.Amounts[c]})
	}
	return out
}

func limitToProto(l *approval.LimitRequest) *payschedv1.OperatorRequest {
	out := &payschedv1.OperatorRequest{Name: fmt.Sprintf("limits/%d", l.ID), Action: approval.SetLimits, State: l.State, Tenant: l.Tenant,
		Limits: &payschedv1.TenantLimits{Weight: int32(l.Weight)}, Reason: l.Reason, RequestedBy: l.RequestedBy, RequestedName: l.RequestedName,
		RequestedAt: timestamppb.New(l.RequestedAt), NeedsApproval: true, DecidedBy: l.DecidedBy, DecidedName: l.DecidedName,
		DecidedAt: ts(l.DecidedAt), ExpiresAt: ts(l.ExpiresAt), Via: "api"}
	if l.MaxInflight != nil {
		out.Limits.MaxInflight = int32(*l.MaxInflight)
	}
	if l.MaxRate != nil {
		out.Limits.MaxRate = *l.MaxRate
	}
	return out
}

// RequestActions apply requests' payments (approval.Actor): the same
// probe-first, fenced moves as the API, each only while the payment is as
// pinned, audited as "admin:<requester>" with the request, its requester
// and its approver in the note.
type RequestActions struct{ S *Server }

var _ approval.Actor = RequestActions{}

func (a RequestActions) as(ctx context.Context, operator string) context.Context {
	return auth.WithPrincipal(ctx, auth.Principal{Actor: operator, Admin: true})
}

// deadAt pins a request's payment: the dead letter at attempt, as it was
// when requested.
func deadAt(attempt int32) *pinned { return &pinned{status: payment.DeadLettered, attempt: attempt} }

// Redrive re-drives the dead letter id if it is still dead-lettered at
// attempt; otherwise it answers CHANGED_SINCE_REQUEST.
func (a RequestActions) Redrive(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.redrive(a.as(ctx, operator), &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: note}, deadAt(attempt))
	return err
}

// Resolve resolves the dead letter id as failed if it is still
// dead-lettered at attempt.
func (a RequestActions) Resolve(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.resolve(a.as(ctx, operator), &payschedv1.ResolvePaymentRequest{PaymentId: id.String(), Note: note}, deadAt(attempt))
	return err
}

// Cancel cancels the dead letter id if it is still dead-lettered at
// attempt: a payment re-driven since is PENDING, and cancelling it is not
// what was approved.
func (a RequestActions) Cancel(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.cancel(a.as(ctx, operator), &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: note}, deadAt(attempt))
	return err
}

// Hold holds the PENDING payment id if it is still PENDING at attempt.
func (a RequestActions) Hold(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.hold(a.as(ctx, operator), id.String(), note, true, payment.Pending, payment.Held, "HOLD",
		&pinned{status: payment.Pending, attempt: attempt})
	return err
}

// Release releases the HELD payment id if it is still HELD at attempt.
func (a RequestActions) Release(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.hold(a.as(ctx, operator), id.String(), note, false, payment.Held, payment.Pending, "RELEASE",
		&pinned{status: payment.Held, attempt: attempt})
	return err
}

// CancelOpen cancels the PENDING or HELD payment id if it is still in
// status from at attempt: asking the gateway first, as every operator
// cancel does.
func (a RequestActions) CancelOpen(ctx context.Context, operator string, id uuid.UUID, from payment.Status, attempt int32, note string) error {
	if from != payment.Pending && from != payment.Held {
		return fmt.Errorf("cancel from %s: not an open status", from)
	}
	_, err := a.S.cancel(a.as(ctx, operator), &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: note},
		&pinned{status: from, attempt: attempt})
	return err
}

// Reschedule moves when the PENDING or HELD payment id runs, if it is
// still at attempt.
func (a RequestActions) Reschedule(ctx context.Context, operator string, id uuid.UUID, attempt int32, runAt time.Time, note string) error {
	_, err := a.S.reschedule(a.as(ctx, operator), id.String(), runAt, note, "RESCHEDULE", &pinned{attempt: attempt})
	return err
}

// RunNow makes the PENDING payment id due now, if it is still PENDING at
// attempt.
func (a RequestActions) RunNow(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.reschedule(a.as(ctx, operator), id.String(), time.Time{}, note, "RUN_NOW",
		&pinned{status: payment.Pending, attempt: attempt})
	return err
}

func endpointToProto(e *approval.EndpointRequest, secret string) *payschedv1.OperatorRequest {
	out := &payschedv1.OperatorRequest{Name: fmt.Sprintf("endpoints/%d", e.ID), Action: e.Action, State: e.State,
		EndpointId: e.EndpointID.String(), OverlapSeconds: e.OverlapSeconds, Since: ts(e.Since), Until: ts(e.Until), Reason: e.Reason,
		RequestedBy: e.RequestedBy, RequestedName: e.RequestedName, RequestedAt: timestamppb.New(e.RequestedAt), NeedsApproval: true,
		DecidedBy: e.DecidedBy, DecidedName: e.DecidedName, DecidedAt: ts(e.DecidedAt), ExpiresAt: timestamppb.New(e.ExpiresAt),
		Error: e.Error, Secret: secret, Via: "api"}
	if e.Recovered != nil {
		out.Recovered = *e.Recovered
	}
	return out
}
