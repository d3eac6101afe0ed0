package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/store"
)

// RequestScheduleChange implements AdminService: an operator's pause,
// resume or cancel of a payer's schedule is a request a second admin
// approves, whatever the policy; payments-api's planner applies it.
func (s *Server) RequestScheduleChange(ctx context.Context, req *payschedv1.RequestScheduleChangeRequest) (*payschedv1.RequestScheduleChangeResponse, error) {
	who, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	id, err := uuid.Parse(req.GetScheduleId())
	if err != nil {
		return nil, invalid("scheduleId", "must be a schedule's id (a UUID)")
	}
	action := strings.ToUpper(strings.TrimSpace(req.GetAction()))
	if action != approval.SchedulePause && action != approval.ScheduleResume && action != approval.ScheduleCancel {
		return nil, invalid("action", "must be PAUSE, RESUME or CANCEL")
	}
	var resumeAt *time.Time
	if r := req.GetResumeAt(); r != nil {
		if action != approval.SchedulePause {
			return nil, invalid("resumeAt", "only a PAUSE names when it ends")
		}
		if err := r.CheckValid(); err != nil {
			return nil, invalid("resumeAt", "must be a valid time")
		}
		t := r.AsTime()
		if !t.After(time.Now()) {
			return nil, invalid("resumeAt", "must be in the future")
		}
		resumeAt = &t
	}
	if err := checkNote(req.GetNote(), true); err != nil {
		return nil, err
	}
	rid, err := s.Requests.RequestSchedule(ctx, action, id, resumeAt, strings.TrimSpace(req.GetNote()), who)
	var stateErr *approval.ScheduleStateError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, apierr.New(codes.NotFound, apierr.ReasonNotFound, "schedule not found", nil)
	case errors.As(err, &stateErr):
		return nil, apierr.New(codes.FailedPrecondition, payments.ReasonScheduleState, stateErr.Error(),
			map[string]string{"state": string(stateErr.State), "scheduleId": id.String()})
	case err != nil:
		return nil, s.internal("request schedule change", err)
	}
	r, err := s.Requests.GetScheduleRequest(ctx, rid)
	if err != nil {
		return nil, s.internal("read schedule request", err)
	}
	return &payschedv1.RequestScheduleChangeResponse{Request: scheduleRequestToProto(r)}, nil
}

// scheduleRequestToProto is a schedule request as the API shows it.
func scheduleRequestToProto(r *approval.ScheduleRequest) *payschedv1.OperatorRequest {
	out := &payschedv1.OperatorRequest{Name: fmt.Sprintf("schedules/%d", r.ID), Action: r.Action, State: r.State,
		ScheduleId: r.Schedule.String(), ResumeAt: ts(r.ResumeAt), Reason: r.Reason, RequestedBy: r.RequestedBy,
		RequestedName: r.RequestedName, RequestedAt: timestamppb.New(r.RequestedAt), NeedsApproval: true, DecidedBy: r.DecidedBy,
		DecidedName: r.DecidedName, DecidedAt: ts(r.DecidedAt), ExpiresAt: timestamppb.New(r.ExpiresAt), Error: r.Error, Via: "api"}
	if r.Withdrawn != nil {
		out.Withdrawn = int32(*r.Withdrawn)
	}
	return out
}
