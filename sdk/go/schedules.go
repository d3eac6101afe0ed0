package paysched

import (
	"context"
	"iter"
	"net/http"
	"time"

	"github.com/paysched/paysched/sdk/go/api"
)

// Recurring schedules, as the generated layer names them.
type (
	// Schedule is a recurring payment plan whose occurrences are payments.
	Schedule = api.V1Schedule
	// NewSchedule is a schedule to make: the payment's fields, an RRULE
	// from a local start in an IANA zone, and its policies.
	NewSchedule = api.V1CreateScheduleRequest
	// ScheduleChange is a schedule's new payment and plan (every field).
	ScheduleChange = api.SchedulesServiceUpdateScheduleBody
	// ScheduleDetail is a schedule with its latest occurrences made.
	ScheduleDetail = api.V1GetScheduleResponse
	// Preview asks for a plan's next occurrences.
	Preview = api.V1PreviewScheduleRequest
	// PreviewOccurrence is one occurrence of a preview: its nominal time,
	// when it is charged and why it moved.
	PreviewOccurrence = api.V1PreviewOccurrence
	// PauseBody is a pause's body in the generated layer.
	PauseBody = api.SchedulesServicePauseScheduleBody
)

// CreateSchedule makes a recurring schedule, with an idempotency key as
// CreatePayment's.
func (c *Client) CreateSchedule(ctx context.Context, s NewSchedule, opts ...CallOption) (*Created[Schedule], error) {
	o := options(opts)
	r, err := c.raw.CreateScheduleWithResponse(ctx, &api.CreateScheduleParams{IdempotencyKey: &o.key}, s)
	if err != nil {
		return nil, transport(err)
	}
	v, err := decoded(r.HTTPResponse, r.Body, r.JSON201, http.StatusCreated)
	if err != nil {
		return nil, err
	}
	return &Created[Schedule]{Value: v, Replayed: replayed(r.HTTPResponse), IdempotencyKey: o.key}, nil
}

// GetSchedule reads a schedule and its latest occurrences made.
func (c *Client) GetSchedule(ctx context.Context, id string) (*ScheduleDetail, error) {
	r, err := c.raw.GetScheduleWithResponse(ctx, id)
	if err != nil {
		return nil, transport(err)
	}
	return decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK)
}

// Schedules iterates over the caller's schedules, newest first.
func (c *Client) Schedules(ctx context.Context, pageSize int32) iter.Seq2[Schedule, error] {
	return pages(func(cursor *string) ([]Schedule, *string, error) {
		params := &api.ListSchedulesParams{Cursor: cursor}
		if pageSize > 0 {
			params.PageSize = &pageSize
		}
		r, err := c.raw.ListSchedulesWithResponse(ctx, params)
		if err != nil {
			return nil, nil, transport(err)
		}
		if err := answered(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
			return nil, nil, err
		}
		page, err := value(r.JSON200)
		if err != nil {
			return nil, nil, err
		}
		return deref(page.Schedules), page.NextCursor, nil
	})
}

// UpdateSchedule replaces a schedule's payment and plan; what was made
// ahead is made again as it now reads. It returns the schedule and how
// many occurrences it withdrew.
func (c *Client) UpdateSchedule(ctx context.Context, id string, s ScheduleChange) (*Schedule, int32, error) {
	r, err := c.raw.UpdateScheduleWithResponse(ctx, id, s)
	if err != nil {
		return nil, 0, transport(err)
	}
	if err := answered(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
		return nil, 0, err
	}
	v, err := value(r.JSON200)
	if err != nil {
		return nil, 0, err
	}
	return v.Schedule, deref1(v.Withdrawn), nil
}

// PauseSchedule pauses a schedule until resumeAt (nil: until resumed),
// withdrawing its occurrences made ahead; it returns how many.
func (c *Client) PauseSchedule(ctx context.Context, id string, resumeAt *time.Time) (*Schedule, int32, error) {
	r, err := c.raw.PauseScheduleWithResponse(ctx, id, api.SchedulesServicePauseScheduleBody{ResumeAt: resumeAt})
	if err != nil {
		return nil, 0, transport(err)
	}
	if err := answered(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
		return nil, 0, err
	}
	v, err := value(r.JSON200)
	if err != nil {
		return nil, 0, err
	}
	return v.Schedule, deref1(v.Withdrawn), nil
}

// ResumeSchedule resumes a paused schedule (what fell due meanwhile
// follows its catch-up policy).
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	r, err := c.raw.ResumeScheduleWithResponse(ctx, id, api.SchedulesServiceResumeScheduleBody{})
	if err != nil {
		return nil, transport(err)
	}
	v, err := decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return value(v.Schedule)
}

// CancelSchedule ends a schedule for good (again: the same answer).
func (c *Client) CancelSchedule(ctx context.Context, id string) (*Schedule, error) {
	r, err := c.raw.CancelScheduleWithResponse(ctx, id, api.SchedulesServiceCancelScheduleBody{})
	if err != nil {
		return nil, transport(err)
	}
	v, err := decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return value(v.Schedule)
}

// PreviewSchedule is a plan's next occurrences (of an existing schedule,
// or of a plan not made yet), each with why it moved.
func (c *Client) PreviewSchedule(ctx context.Context, p Preview) ([]PreviewOccurrence, error) {
	r, err := c.raw.PreviewScheduleWithResponse(ctx, p)
	if err != nil {
		return nil, transport(err)
	}
	v, err := decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return deref(v.Occurrences), nil
}

func deref1[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
