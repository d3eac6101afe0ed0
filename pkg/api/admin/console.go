package admin

import (
	"context"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
)

// ConsoleActions lets the operator console act through this service: the
// same probe-first, fenced moves as the API, audited as
// "admin:console:<operator>".
type ConsoleActions struct{ S *Server }

func (a ConsoleActions) as(ctx context.Context, operator string) context.Context {
	return auth.WithPrincipal(ctx, auth.Principal{Actor: "console:" + operator, Admin: true})
}

// Redrive re-drives a dead letter (console.Actions).
func (a ConsoleActions) Redrive(ctx context.Context, operator string, id uuid.UUID, note string) error {
	_, err := a.S.RedrivePayment(a.as(ctx, operator), &payschedv1.RedrivePaymentRequest{PaymentId: id.String(), Note: note})
	return err
}

// Resolve resolves a dead letter as failed (console.Actions).
func (a ConsoleActions) Resolve(ctx context.Context, operator string, id uuid.UUID, note string) error {
	_, err := a.S.ResolvePayment(a.as(ctx, operator), &payschedv1.ResolvePaymentRequest{PaymentId: id.String(), Note: note})
	return err
}

// Cancel cancels a payment at rest (console.Actions).
func (a ConsoleActions) Cancel(ctx context.Context, operator string, id uuid.UUID, note string) error {
	_, err := a.S.CancelPayment(a.as(ctx, operator), &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: note})
	return err
}

// Reconcile starts a run of day in the background (a run can take
// minutes; its row shows it RUNNING meanwhile) and returns at once.
func (a ConsoleActions) Reconcile(ctx context.Context, operator string, day time.Time) error {
	if a.S.runner == nil {
		return apierr.New(codes.FailedPrecondition, "RECONCILER_NOT_CONFIGURED", "this admin-api has no gateway address to reconcile against", nil)
	}
	rctx := a.as(context.WithoutCancel(ctx), operator)
	go func() {
		if _, err := a.S.TriggerReconciliationRun(rctx, &payschedv1.TriggerReconciliationRunRequest{Day: day.Format(time.DateOnly)}); err != nil {
			a.S.log.Error("console reconciliation run", "day", day.Format(time.DateOnly), "err", err)
		}
	}()
	return nil
}
