package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/cursor"
	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/recurrence"
	"github.com/paysched/paysched/pkg/store"
)

// ReasonScheduleState is the ErrorInfo reason of a change the schedule's
// state does not allow (a pause of a cancelled schedule).
const ReasonScheduleState = "SCHEDULE_STATE"

// ReasonNoOccurrence is the ErrorInfo reason of a plan whose rule makes no
// occurrence from now on (its COUNT or UNTIL is behind it).
const ReasonNoOccurrence = "NO_OCCURRENCE"

// Limits of a schedule's fields.
const (
	MaxRuleLen        = 500
	MaxStartYearsBack = 10
	MaxCatchUpBound   = 120
	DefaultCatchUp    = 12
	DefaultPreview    = 12
	MaxPreview        = 100
	scheduleRecentMax = 24
)

// Schedules implements SchedulesService.
type Schedules struct {
	payschedv1.UnimplementedSchedulesServiceServer
	db      pgdb.DB
	rules   Rules
	cursors *cursor.Signer
	log     *slog.Logger
	now     func() time.Time
}

// NewSchedules returns the service over db.
func NewSchedules(db pgdb.DB, rules Rules, cursorSecret []byte, log *slog.Logger) *Schedules {
	return &Schedules{db: db, rules: rules, cursors: cursor.NewSigner(cursorSecret), log: log, now: time.Now}
}

func (s *Schedules) internal(op string, err error) error { return apierr.FromFailure(s.log, op, err) }

// planSpec is the plan fields of a create or preview request.
type planSpec struct {
	rule, start, zone, calendar string
	monthEnd                    payschedv1.MonthEndPolicy
	businessDays                payschedv1.BusinessDayConvention
}

func (p planSpec) spec() recurrence.Spec {
	return recurrence.Spec{Rule: p.rule, Start: p.start, Zone: p.zone, Calendar: strings.ToUpper(p.calendar),
		MonthEnd: enumName(p.monthEnd.String(), "MONTH_END_POLICY_", "CLAMP"), BusinessDays: enumName(p.businessDays.String(), "BUSINESS_DAY_CONVENTION_", "NONE")}
}

// enumName is an enum value's stored name: its String without the
// prefix, def for the unspecified value.
func enumName(s, prefix, def string) string {
	n := strings.TrimPrefix(s, prefix)
	if n == "UNSPECIFIED" || n == s {
		return def
	}
	return n
}

// checkPlan reads a plan, every mistake named by its field.
func checkPlan(bad func(field, format string, args ...any), p planSpec) (recurrence.Plan, bool) {
	ok := true
	if len(p.rule) > MaxRuleLen || !printable(p.rule, false) {
		bad("rrule", "must be at most %d printable characters", MaxRuleLen)
		ok = false
	} else if _, err := recurrence.ParseRule(p.rule); err != nil {
		bad("rrule", "%s", strings.TrimPrefix(err.Error(), recurrence.ErrRule.Error()+": "))
		ok = false
	}
	if w, err := recurrence.ParseWall(p.start); err != nil {
		bad("start", "must be a local date and time, YYYY-MM-DDTHH:MM[:SS], without a zone or offset")
		ok = false
	} else if w.Year < time.Now().Year()-MaxStartYearsBack {
		// A start in the past only anchors the rule, and placing a plan
		// walks it from there: a start centuries back would cost a
		// request as much as it likes.
		bad("start", "must be at most %d years in the past", MaxStartYearsBack)
		ok = false
	}
	if p.zone == "" {
		bad("timeZone", "is required: an IANA zone such as Europe/Paris")
		ok = false
	} else if _, err := time.LoadLocation(p.zone); err != nil || strings.EqualFold(p.zone, "local") || !printable(p.zone, false) {
		bad("timeZone", "must be an IANA time zone such as Europe/Paris")
		ok = false
	}
	if p.calendar != "" {
		if _, err := recurrence.CalendarFor(p.calendar); err != nil {
			bad("calendar", "must be a country code with a holiday calendar: %s", strings.Join(recurrence.Countries(), ", "))
			ok = false
		}
	}
	if !ok {
		return recurrence.Plan{}, false
	}
	plan, err := p.spec().Plan()
	if err != nil {
		bad("rrule", "%s", strings.TrimPrefix(err.Error(), recurrence.ErrRule.Error()+": "))
		return recurrence.Plan{}, false
	}
	return plan, true
}

// violations collects field violations.
type violations []apierr.Violation

func (v *violations) bad(field, format string, args ...any) {
	*v = append(*v, apierr.Violation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// scheduleFingerprint hashes a create request without its request_id:
// a replay must carry the same body.
func scheduleFingerprint(req *payschedv1.CreateScheduleRequest) []byte {
	req = proto.CloneOf(req)
	req.RequestId = ""
	return bodyHash(req)
}

// CreateSchedule implements SchedulesService.
func (s *Schedules) CreateSchedule(ctx context.Context, req *payschedv1.CreateScheduleRequest) (*payschedv1.CreateScheduleResponse, error) {
	actorID, err := actor(ctx)
	if err != nil {
		return nil, err
	}
	key, err := idempotencyKey(ctx, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	row, err := s.prepare(req, s.now())
	if err != nil {
		return nil, err
	}
	if row.ID, err = uuid.NewV7(); err != nil {
		return nil, s.internal("create schedule: id", err)
	}
	row.Tenant, row.Payer, row.IdempotencyKey, row.RequestHash = tenantOf(ctx), actorID, key, scheduleFingerprint(req)
	got, replay, err := store.CreateSchedule(ctx, s.db, row)
	switch {
	case errors.Is(err, store.ErrScheduleKeyReused):
		return nil, keyReused(key)
	case err != nil:
		return nil, s.internal("create schedule", err)
	}
	if replay {
		_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderReplayed, "true"))
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderHTTPCode, "201"))
	return &payschedv1.CreateScheduleResponse{Schedule: scheduleProto(got)}, nil
}

// prepare checks a schedule's fields, every mistake named by its field,
// and places its plan at now: the row to write, without its identity.
func (s *Schedules) prepare(req *payschedv1.CreateScheduleRequest, now time.Time) (store.Schedule, error) {
	var vs violations
	currency := req.GetCurrency()
	s.rules.checkParties(vs.bad, req.GetPayee(), req.GetAmount(), &currency)
	checkText(vs.bad, req.GetDescription(), req.GetMetadata())
	ps := planSpec{rule: req.GetRrule(), start: req.GetStart(), zone: req.GetTimeZone(), calendar: req.GetCalendar(),
		monthEnd: req.GetMonthEnd(), businessDays: req.GetBusinessDays()}
	plan, planOK := checkPlan(vs.bad, ps)
	bound := int(req.GetCatchUpBound())
	switch {
	case bound == 0:
		bound = DefaultCatchUp
	case bound < 0 || bound > MaxCatchUpBound:
		vs.bad("catchUpBound", "must be between 1 and %d (0 means %d)", MaxCatchUpBound, DefaultCatchUp)
	}
	if _, ok := payschedv1.CatchUpPolicy_name[int32(req.GetCatchUp())]; !ok {
		vs.bad("catchUp", "must be SKIP_MISSED, LATEST_ONLY or ALL")
	}
	if _, ok := payschedv1.MonthEndPolicy_name[int32(req.GetMonthEnd())]; !ok {
		vs.bad("monthEnd", "must be CLAMP or SKIP")
	}
	if _, ok := payschedv1.BusinessDayConvention_name[int32(req.GetBusinessDays())]; !ok {
		vs.bad("businessDays", "must be NONE, FOLLOWING, MODIFIED_FOLLOWING or PRECEDING")
	}
	if len(vs) > 0 || !planOK {
		return store.Schedule{}, apierr.Invalid("the request has invalid fields", vs)
	}
	place, first, err := planner.Place(plan, now)
	if errors.Is(err, planner.ErrNoOccurrence) {
		return store.Schedule{}, apierr.New(codes.InvalidArgument, ReasonNoOccurrence,
			"the rule makes no occurrence from now on: its COUNT or UNTIL is behind it", nil)
	}
	if err != nil {
		return store.Schedule{}, s.internal("schedule: place", err)
	}
	if first.At.After(now.Add(s.rules.Horizon)) {
		return store.Schedule{}, apierr.Invalid("the first occurrence is too far ahead", []apierr.Violation{{Field: "start",
			Description: fmt.Sprintf("the first occurrence (%s) must be at most %s ahead", first.Nominal, humanDuration(s.rules.Horizon))}})
	}
	spec := ps.spec()
	return store.Schedule{Payee: req.GetPayee(), Amount: req.GetAmount(), Currency: currency,
		Description: req.GetDescription(), Metadata: req.GetMetadata(), Rule: plan.Rule.String(), Start: plan.Start.String(),
		Zone: spec.Zone, MonthEnd: spec.MonthEnd, BusinessDays: spec.BusinessDays, Calendar: spec.Calendar,
		CatchUp: enumName(req.GetCatchUp().String(), "CATCH_UP_POLICY_", "SKIP_MISSED"), CatchUpBound: bound,
		NextAt: place.NextAt, LastOccurrence: place.LastOccurrence, LastIndex: place.LastIndex}, nil
}

// UpdateSchedule implements SchedulesService.
func (s *Schedules) UpdateSchedule(ctx context.Context, req *payschedv1.UpdateScheduleRequest) (*payschedv1.UpdateScheduleResponse, error) {
	actorID, id, err := scheduleTarget(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	now := s.now()
	row, err := s.prepare(&payschedv1.CreateScheduleRequest{Payee: req.GetPayee(), Amount: req.GetAmount(), Currency: req.GetCurrency(),
		Description: req.GetDescription(), Metadata: req.GetMetadata(), Rrule: req.GetRrule(), Start: req.GetStart(),
		TimeZone: req.GetTimeZone(), MonthEnd: req.GetMonthEnd(), BusinessDays: req.GetBusinessDays(), Calendar: req.GetCalendar(),
		CatchUp: req.GetCatchUp(), CatchUpBound: req.GetCatchUpBound()}, now)
	if err != nil {
		return nil, err
	}
	row.ID = id
	sc, n, err := store.UpdateSchedule(ctx, s.db, now, actorID, row)
	if err != nil {
		return nil, changeErr(s, "changed", sc, err)
	}
	return &payschedv1.UpdateScheduleResponse{Schedule: scheduleProto(sc), Withdrawn: int32(n)}, nil
}

// scheduleTarget is the caller and the schedule a request names.
func scheduleTarget(ctx context.Context, scheduleID string) (string, uuid.UUID, error) {
	return targetOf(ctx, "scheduleId", scheduleID)
}

// load reads the caller's schedule: NOT_FOUND for another's or none.
func (s *Schedules) load(ctx context.Context, actorID string, id uuid.UUID) (*store.Schedule, error) {
	sc, err := store.GetSchedule(ctx, s.db, actorID, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, scheduleNotFound()
	}
	if err != nil {
		return nil, s.internal("read schedule", err)
	}
	return sc, nil
}

func scheduleNotFound() error {
	return apierr.New(codes.NotFound, apierr.ReasonNotFound, "schedule not found", nil)
}

// GetSchedule implements SchedulesService.
func (s *Schedules) GetSchedule(ctx context.Context, req *payschedv1.GetScheduleRequest) (*payschedv1.GetScheduleResponse, error) {
	actorID, id, err := scheduleTarget(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	sc, err := s.load(ctx, actorID, id)
	if err != nil {
		return nil, err
	}
	occ, err := store.ScheduleOccurrences(ctx, s.db, id, scheduleRecentMax)
	if err != nil {
		return nil, s.internal("get schedule: occurrences", err)
	}
	out := &payschedv1.GetScheduleResponse{Schedule: scheduleProto(sc), Occurrences: []*payschedv1.ScheduleOccurrence{}}
	for _, o := range occ {
		out.Occurrences = append(out.Occurrences, &payschedv1.ScheduleOccurrence{Occurrence: o.Key, Index: int32(o.Index),
			PaymentId: o.Payment.String(), DueAt: timestamppb.New(o.DueAt)})
	}
	return out, nil
}

// ListSchedules implements SchedulesService.
func (s *Schedules) ListSchedules(ctx context.Context, req *payschedv1.ListSchedulesRequest) (*payschedv1.ListSchedulesResponse, error) {
	actorID, err := actor(ctx)
	if err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	// The cursor is bound to the actor.
	rows, next, err := readPage(keyset{cursors: s.cursors, log: s.log, token: req.GetCursor(), scope: actorID + "\x00schedules",
		size: size, hint: "pass back next_cursor unchanged", op: "list schedules"},
		func(before int64, limit int) ([]store.Schedule, error) {
			return store.ListSchedules(ctx, s.db, actorID, before, limit)
		},
		func(sc store.Schedule) int64 { return sc.Seq }, scheduleProto)
	if err != nil {
		return nil, err
	}
	return &payschedv1.ListSchedulesResponse{Schedules: rows, NextCursor: next}, nil
}

func changeErr(s *Schedules, op string, sc *store.Schedule, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return scheduleNotFound()
	case errors.Is(err, store.ErrScheduleState):
		return apierr.New(codes.FailedPrecondition, ReasonScheduleState,
			fmt.Sprintf("the schedule is %s: it cannot be %s", strings.ToLower(string(sc.State)), op),
			map[string]string{"state": string(sc.State), "scheduleId": sc.ID.String()})
	default:
		return s.internal(op+" schedule", err)
	}
}

// PauseSchedule implements SchedulesService.
func (s *Schedules) PauseSchedule(ctx context.Context, req *payschedv1.PauseScheduleRequest) (*payschedv1.PauseScheduleResponse, error) {
	actorID, id, err := scheduleTarget(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	now := s.now()
	var resume *time.Time
	if r := req.GetResumeAt(); r != nil {
		if r.CheckValid() != nil || !r.AsTime().After(now) || r.AsTime().After(now.Add(s.rules.Horizon)) {
			return nil, apierr.Invalid("resumeAt is invalid", []apierr.Violation{{Field: "resumeAt",
				Description: fmt.Sprintf("must be in the future and at most %s ahead", humanDuration(s.rules.Horizon))}})
		}
		t := r.AsTime().Truncate(time.Microsecond)
		resume = &t
	}
	sc, n, err := store.PauseSchedule(ctx, s.db, now, actorID, id, resume)
	if err != nil {
		return nil, changeErr(s, "paused", sc, err)
	}
	return &payschedv1.PauseScheduleResponse{Schedule: scheduleProto(sc), Withdrawn: int32(n)}, nil
}

// ResumeSchedule implements SchedulesService.
func (s *Schedules) ResumeSchedule(ctx context.Context, req *payschedv1.ResumeScheduleRequest) (*payschedv1.ResumeScheduleResponse, error) {
	actorID, id, err := scheduleTarget(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	sc, err := store.ResumeSchedule(ctx, s.db, s.now(), actorID, id)
	if err != nil {
		return nil, changeErr(s, "resumed", sc, err)
	}
	return &payschedv1.ResumeScheduleResponse{Schedule: scheduleProto(sc)}, nil
}

// CancelSchedule implements SchedulesService.
func (s *Schedules) CancelSchedule(ctx context.Context, req *payschedv1.CancelScheduleRequest) (*payschedv1.CancelScheduleResponse, error) {
	actorID, id, err := scheduleTarget(ctx, req.GetScheduleId())
	if err != nil {
		return nil, err
	}
	sc, n, err := store.CancelSchedule(ctx, s.db, s.now(), actorID, id)
	if err != nil {
		if errors.Is(err, store.ErrScheduleState) && sc.State == store.ScheduleCancelled {
			// Cancel is idempotent.
			return &payschedv1.CancelScheduleResponse{Schedule: scheduleProto(sc)}, nil
		}
		return nil, changeErr(s, "cancelled", sc, err)
	}
	return &payschedv1.CancelScheduleResponse{Schedule: scheduleProto(sc), Withdrawn: int32(n)}, nil
}

// PreviewSchedule implements SchedulesService.
func (s *Schedules) PreviewSchedule(ctx context.Context, req *payschedv1.PreviewScheduleRequest) (*payschedv1.PreviewScheduleResponse, error) {
	actorID, err := actor(ctx)
	if err != nil {
		return nil, err
	}
	n := int(req.GetCount())
	switch {
	case n == 0:
		n = DefaultPreview
	case n < 0 || n > MaxPreview:
		return nil, apierr.Invalid("count is out of range", []apierr.Violation{{Field: "count",
			Description: fmt.Sprintf("must be between 1 and %d (0 means %d)", MaxPreview, DefaultPreview)}})
	}
	var plan recurrence.Plan
	if req.GetScheduleId() != "" {
		id, err := apierr.ParseID("scheduleId", req.GetScheduleId())
		if err != nil {
			return nil, err
		}
		sc, err := s.load(ctx, actorID, id)
		if err != nil {
			return nil, err
		}
		if plan, err = planner.Plan(sc); err != nil {
			return nil, s.internal("preview schedule: plan", err)
		}
	} else {
		var vs violations
		var ok bool
		plan, ok = checkPlan(vs.bad, planSpec{rule: req.GetRrule(), start: req.GetStart(), zone: req.GetTimeZone(),
			calendar: req.GetCalendar(), monthEnd: req.GetMonthEnd(), businessDays: req.GetBusinessDays()})
		if !ok {
			return nil, apierr.Invalid("the plan has invalid fields", vs)
		}
	}
	out := &payschedv1.PreviewScheduleResponse{Occurrences: []*payschedv1.PreviewOccurrence{}}
	for _, o := range plan.Next(s.now(), n) {
		moved := make([]string, 0, len(o.Moved))
		for _, m := range o.Moved {
			moved = append(moved, string(m))
		}
		out.Occurrences = append(out.Occurrences, &payschedv1.PreviewOccurrence{Index: int32(o.Index), Nominal: o.Nominal.String(),
			Local: o.Local.String(), DueAt: timestamppb.New(o.At), Moved: moved})
	}
	return out, nil
}

var scheduleStates = map[store.ScheduleState]payschedv1.ScheduleState{
	store.ScheduleActive: payschedv1.ScheduleState_SCHEDULE_STATE_ACTIVE, store.SchedulePaused: payschedv1.ScheduleState_SCHEDULE_STATE_PAUSED,
	store.ScheduleEnded: payschedv1.ScheduleState_SCHEDULE_STATE_ENDED, store.ScheduleCancelled: payschedv1.ScheduleState_SCHEDULE_STATE_CANCELLED,
}

func scheduleProto(s *store.Schedule) *payschedv1.Schedule {
	out := &payschedv1.Schedule{ScheduleId: s.ID.String(), Payer: s.Payer, Payee: s.Payee, Amount: s.Amount, Currency: s.Currency,
		Description: s.Description, Metadata: s.Metadata, Rrule: s.Rule, Start: s.Start, TimeZone: s.Zone,
		MonthEnd:     payschedv1.MonthEndPolicy(payschedv1.MonthEndPolicy_value["MONTH_END_POLICY_"+s.MonthEnd]),
		BusinessDays: payschedv1.BusinessDayConvention(payschedv1.BusinessDayConvention_value["BUSINESS_DAY_CONVENTION_"+s.BusinessDays]),
		Calendar:     s.Calendar, CatchUp: payschedv1.CatchUpPolicy(payschedv1.CatchUpPolicy_value["CATCH_UP_POLICY_"+s.CatchUp]),
		CatchUpBound: int32(s.CatchUpBound), State: scheduleStates[s.State], LastOccurrence: s.LastOccurrence, Occurrences: int32(s.LastIndex),
		CreatedAt: timestamppb.New(s.CreatedAt), UpdatedAt: timestamppb.New(s.UpdatedAt)}
	if s.ResumeAt != nil {
		out.ResumeAt = timestamppb.New(*s.ResumeAt)
	}
	if s.NextAt != nil {
		out.NextAt = timestamppb.New(*s.NextAt)
	}
	return out
}
