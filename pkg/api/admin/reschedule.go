package admin

import (
	"context"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// maxReschedule is how far ahead an operator may move a payment: a
// reschedule is a delay, not a new schedule (that is the client's, with a
// cancel and a new payment).
const maxReschedule = 90 * 24 * time.Hour

// checkRunAt refuses a time to run a payment at unless it is ahead of now
// by at most maxReschedule.
func checkRunAt(runAt, now time.Time) error {
	switch {
	case !runAt.After(now):
		return invalid("runAt", "must be in the future (to run a payment now, use run-now)")
	case runAt.After(now.Add(maxReschedule)):
		return invalid("runAt", "must be at most 90 days ahead (a later payment is its client's to schedule anew)")
	}
	return nil
}

// ReschedulePayment implements AdminService: a PENDING or HELD payment
// runs at another time, never before its due time. Fenced on the attempt
// read: a claim in between makes it miss (MOVED_MEANWHILE).
func (s *Server) ReschedulePayment(ctx context.Context, req *payschedv1.ReschedulePaymentRequest) (*payschedv1.ReschedulePaymentResponse, error) {
	if !req.GetRunAt().IsValid() {
		return nil, invalid("runAt", "is required: when the payment should run (RFC 3339)")
	}
	a, err := s.guard(ctx, ask{action: "RESCHEDULE", paymentID: req.GetPaymentId(), note: req.GetNote(), noteRequired: true,
		runAt: req.GetRunAt().AsTime()})
	if err != nil {
		return nil, err
	}
	return &payschedv1.ReschedulePaymentResponse{Payment: a.payment, Request: a.request}, nil
}

// RunPaymentNow implements AdminService: a PENDING payment waiting past
// its due time is due at once.
func (s *Server) RunPaymentNow(ctx context.Context, req *payschedv1.RunPaymentNowRequest) (*payschedv1.RunPaymentNowResponse, error) {
	a, err := s.guard(ctx, ask{action: "RUN_NOW", paymentID: req.GetPaymentId(), note: req.GetNote(), noteRequired: true})
	if err != nil {
		return nil, err
	}
	return &payschedv1.RunPaymentNowResponse{Payment: a.payment, Request: a.request}, nil
}

// reschedule sets when a payment runs (runAt zero: now, a run-now, for
// PENDING payments only), fenced on the attempt read and, with a pin,
// only while the payment is as pinned.
func (s *Server) reschedule(ctx context.Context, paymentID string, runAt time.Time, note, action string, pin *pinned) (*payschedv1.ScheduledPayment, error) {
	who, id, err := operatorOn(ctx, paymentID, note, true)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if !runAt.IsZero() {
		if err := checkRunAt(runAt, now); err != nil {
			return nil, err
		}
	}
	p, err := s.readPayment(ctx, id, pin)
	if err != nil {
		return nil, err
	}
	from := []payment.Status{payment.Pending, payment.Held}
	if runAt.IsZero() {
		from = from[:1] // a HELD payment runs when released
	}
	if !slices.Contains(from, p.Status) {
		return nil, apierr.New(codes.FailedPrecondition, "NOT_PENDING",
			"only a PENDING payment can be run now, or a PENDING or HELD one rescheduled; this one is "+string(p.Status),
			map[string]string{"status": string(p.Status)})
	}
	switch {
	case runAt.IsZero() && p.DueAt.After(now):
		// The due time is the instant its client asked for: charging
		// sooner is the client's call (cancel, and schedule anew), never
		// an operator's. It is also the partition key, which no move
		// changes.
		return nil, apierr.New(codes.FailedPrecondition, "NOT_DUE_YET",
			"the payment is due at "+p.DueAt.Format(time.RFC3339)+": it never runs before its due time",
			map[string]string{"dueAt": p.DueAt.Format(time.RFC3339)})
	case !runAt.IsZero() && runAt.Before(p.DueAt):
		return nil, invalid("runAt", "must not be before the payment's due time, "+p.DueAt.Format(time.RFC3339))
	}
	r := store.Reschedule{ID: id, From: from, Attempt: p.Attempt, RunAt: runAt, Actor: "admin:" + who, Action: action, Reason: note,
		Request: approval.RequestOf(ctx)}
	if pin != nil && pin.status != "" {
		r.From = []payment.Status{pin.status}
	}
	_, err = store.ApplyReschedule(ctx, s.db, r)
	out, err := s.afterMove(ctx, id, pin, "reschedule payment", err)
	if err != nil {
		return nil, err
	}
	s.log.Info("admin action", "actor", who, "action", action, "payment", id, "status", out.Status, "run_at", out.RunAt, "note", note)
	return payments.ToProto(out), nil
}
