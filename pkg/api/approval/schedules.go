package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/api/approval/approvaldb"
	"github.com/paysched/paysched/pkg/store"
)

// The actions on a recurring schedule an operator may ask for. Each takes
// a second admin, whatever the policy: a pause and a cancel withdraw the
// occurrences made ahead (their payments are cancelled), a resume makes
// them again.
const (
	SchedulePause  = "PAUSE"
	ScheduleResume = "RESUME"
	ScheduleCancel = "CANCEL"
)

// scheduleFrom is the states each action may leave.
var scheduleFrom = map[string][]store.ScheduleState{
	SchedulePause:  {store.ScheduleActive},
	ScheduleResume: {store.SchedulePaused},
	ScheduleCancel: {store.ScheduleActive, store.SchedulePaused},
}

// ErrScheduleAction means the action is not one a schedule request takes.
var ErrScheduleAction = errors.New("want PAUSE, RESUME or CANCEL")

// ScheduleRequest is an operator's pause, resume or cancel of a payer's
// schedule. It is approved by a second identity, and applied by
// payments-api's planner at its next pass (the role that changes
// schedules): APPLIED, or NOT_APPLIED when the schedule had moved.
type ScheduleRequest struct {
	ID            int64
	Action        string
	Schedule      uuid.UUID
	ResumeAt      *time.Time
	Reason        string
	State         string
	RequestedBy   string
	RequestedName string
	RequestedAt   time.Time
	DecidedBy     string
	DecidedName   string
	DecidedAt     *time.Time
	ExpiresAt     time.Time
	AppliedAt     *time.Time
	Withdrawn     *int
	Error         string
}

func fromScheduleRow(row approvaldb.ScheduleRequest) (*ScheduleRequest, error) {
	r := &ScheduleRequest{ID: row.ID, Action: row.Action, Schedule: row.ScheduleID, ResumeAt: row.ResumeAt, Reason: row.Reason,
		State: row.State, RequestedBy: row.RequestedBy, RequestedName: row.RequestedName, RequestedAt: row.RequestedAt,
		DecidedBy: or(row.DecidedBy, ""), DecidedName: or(row.DecidedName, ""), DecidedAt: row.DecidedAt, ExpiresAt: row.ExpiresAt,
		AppliedAt: row.AppliedAt, Error: or(row.Error, "")}
	if row.Withdrawn != nil {
		n := int(*row.Withdrawn)
		r.Withdrawn = &n
	}
	return r, nil
}

// ScheduleStateError says a schedule is in no state the action may leave.
type ScheduleStateError struct {
	Action string
	State  store.ScheduleState
}

// Error says which action the state refuses.
func (e *ScheduleStateError) Error() string {
	return fmt.Sprintf("a schedule that is %s cannot be asked to %s", e.State, e.Action)
}

// RequestSchedule records who's action on schedule id, awaiting a second
// identity. The schedule must exist (store.ErrNotFound) and be in a state
// the action may leave (*ScheduleStateError); it is checked again when
// the approved request is applied.
func (q *Requests) RequestSchedule(ctx context.Context, action string, id uuid.UUID, resumeAt *time.Time, reason string, who Identity) (int64, error) {
	from, ok := scheduleFrom[action]
	if !ok {
		return 0, ErrScheduleAction
	}
	if action != SchedulePause {
		resumeAt = nil
	}
	s, err := store.GetSchedule(ctx, q.db, "", id)
	if err != nil {
		return 0, err
	}
	if !slices.Contains(from, s.State) {
		return 0, &ScheduleStateError{Action: action, State: s.State}
	}
	rid, err := approvaldb.New(q.db).CreateScheduleRequest(ctx, approvaldb.CreateScheduleRequestParams{Action: action, ScheduleID: id,
		ResumeAt: resumeAt, Reason: reason, RequestedBy: who.Operator, RequestedName: who.Name, Expiry: q.policy.Expiry})
	if err != nil {
		return 0, fmt.Errorf("request %s of schedule %s: %w", action, id, err)
	}
	q.log.Info("approval: schedule change requested", "id", rid, "action", action, "schedule", id, "operator", who.Name, "identity", who.Operator)
	return rid, nil
}

// DecideSchedule approves (APPROVED: payments-api's planner applies it at
// its next pass) or rejects schedule request id as by.
func (q *Requests) DecideSchedule(ctx context.Context, id int64, approve bool, by Identity) error {
	state := decision(approve, "APPROVED")
	// A waiting, unexpired request, never the requester's own (by
	// identity; a CHECK holds it too).
	_, err := approvaldb.New(q.db).DecideScheduleRequest(ctx, approvaldb.DecideScheduleRequestParams{ID: id, State: state,
		DecidedBy: by.Operator, DecidedName: by.Name})
	return decided(ctx, q.log, err, by, "schedule request", id, state, q.GetScheduleRequest)
}

// GetScheduleRequest reads schedule request id (ErrNotFound).
func (q *Requests) GetScheduleRequest(ctx context.Context, id int64) (*ScheduleRequest, error) {
	row, err := approvaldb.New(q.db).GetScheduleRequest(ctx, id)
	return one(row, err, fromScheduleRow, "schedule request", id)
}

// ListScheduleRequests is the schedule requests awaiting approval or
// approved, then the latest 50 closed; of one schedule when id is not the
// nil uuid.
func (q *Requests) ListScheduleRequests(ctx context.Context, id uuid.UUID) ([]*ScheduleRequest, error) {
	db := approvaldb.New(q.db)
	open := func(ctx context.Context) ([]approvaldb.ScheduleRequest, error) {
		return db.OpenScheduleRequests(ctx, id)
	}
	closed := func(ctx context.Context) ([]approvaldb.ScheduleRequest, error) {
		return db.ClosedScheduleRequests(ctx, id)
	}
	return both(ctx, open, closed, fromScheduleRow, "list schedule requests")
}
