package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/payment"
)

// ConsoleActions lets the operator console act through this service: the
// same probe-first, fenced moves as the API, audited as
// "admin:console:<operator>".
type ConsoleActions struct{ S *Server }

func (a ConsoleActions) as(ctx context.Context, operator string) context.Context {
	return auth.WithPrincipal(ctx, auth.Principal{Actor: "console:" + operator, Admin: true})
}

// deadAt pins a console request's payment: the dead letter at attempt, as
// it was when requested.
func deadAt(attempt int32) *pinned { return &pinned{status: payment.DeadLettered, attempt: attempt} }

// Redrive re-drives the dead letter id if it is still dead-lettered at
// attempt (console.Actions); otherwise it answers CHANGED_SINCE_REQUEST.
func (a ConsoleActions) Redrive(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.redrive(a.as(ctx, operator), &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: note}, deadAt(attempt))
	return err
}

// Resolve resolves the dead letter id as failed if it is still
// dead-lettered at attempt (console.Actions).
func (a ConsoleActions) Resolve(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.resolve(a.as(ctx, operator), &payschedv1.ResolvePaymentRequest{PaymentId: id.String(), Note: note}, deadAt(attempt))
	return err
}

// Cancel cancels the dead letter id if it is still dead-lettered at
// attempt (console.Actions): a payment re-driven since is PENDING, and
// cancelling it is not what was approved.
func (a ConsoleActions) Cancel(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.cancel(a.as(ctx, operator), &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: note}, deadAt(attempt))
	return err
}

// Hold holds the PENDING payment id if it is still PENDING at attempt
// (console.Actions).
func (a ConsoleActions) Hold(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.hold(a.as(ctx, operator), id.String(), note, true, payment.Pending, payment.Held, "HOLD",
		&pinned{status: payment.Pending, attempt: attempt})
	return err
}

// Release releases the HELD payment id if it is still HELD at attempt
// (console.Actions).
func (a ConsoleActions) Release(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.hold(a.as(ctx, operator), id.String(), note, false, payment.Held, payment.Pending, "RELEASE",
		&pinned{status: payment.Held, attempt: attempt})
	return err
}

// CancelOpen cancels the PENDING or HELD payment id if it is still in
// status from at attempt (console.Actions): asking the gateway first, as
// every operator cancel does.
func (a ConsoleActions) CancelOpen(ctx context.Context, operator string, id uuid.UUID, from payment.Status, attempt int32, note string) error {
	if from != payment.Pending && from != payment.Held {
		return fmt.Errorf("cancel from %s: not an open status", from)
	}
	_, err := a.S.cancel(a.as(ctx, operator), &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: note},
		&pinned{status: from, attempt: attempt})
	return err
}

// Reconcile starts a run of day in the background (a run can take
// minutes; its row shows it RUNNING meanwhile) and returns at once; one
// already in flight is answered FAILED_PRECONDITION RUN_IN_PROGRESS,
// nothing started (console.Actions).
func (a ConsoleActions) Reconcile(ctx context.Context, operator string, day time.Time) error {
	done, err := a.S.startRun(ctx, day, "admin:console:"+operator)
	if err != nil {
		return err
	}
	go func() {
		if res := <-done; res.Err != nil {
			a.S.log.Error("console reconciliation run", "day", day.Format(time.DateOnly), "err", res.Err)
		}
	}()
	return nil
}

// Reschedule moves when the PENDING payment id runs, if it is still
// PENDING at attempt (console.Actions).
func (a ConsoleActions) Reschedule(ctx context.Context, operator string, id uuid.UUID, attempt int32, runAt time.Time, note string) error {
	_, err := a.S.reschedule(a.as(ctx, operator), id.String(), runAt, note, "RESCHEDULE",
		&pinned{status: payment.Pending, attempt: attempt})
	return err
}

// RunNow makes the PENDING payment id due now, if it is still PENDING at
// attempt (console.Actions).
func (a ConsoleActions) RunNow(ctx context.Context, operator string, id uuid.UUID, attempt int32, note string) error {
	_, err := a.S.reschedule(a.as(ctx, operator), id.String(), time.Time{}, note, "RUN_NOW",
		&pinned{status: payment.Pending, attempt: attempt})
	return err
}
