package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// Resolver settles payments dead-lettered as AMBIGUOUS_UNRESOLVED (the
// executor could not learn whether the gateway charged them) by asking the
// gateway, with backoff, until it gives a definitive answer:
//
//   - a succeeded charge: COMPLETED;
//   - a declined one: FAILED;
//   - no charge under the key: PENDING again with a fresh budget. Safe: a
//     retry uses the same key, so a charge that lands late is the same one.
type Resolver struct {
	DB      *pgxpool.Pool
	Gateway gatewayv1.GatewayServiceClient
	// Interval between scans (default 5s).
	Interval time.Duration
	// Backoff after an unanswered probe, doubling up to MaxBackoff
	// (defaults 10s and 1h).
	Backoff, MaxBackoff time.Duration
	// Batch: dead letters probed per scan (default 100).
	Batch   int
	Metrics *Metrics
	Log     *slog.Logger
}

// Run probes until ctx ends.
func (r *Resolver) Run(ctx context.Context) error {
	if r.Interval <= 0 {
		r.Interval = 5 * time.Second
	}
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		if _, err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.log().Warn("resolve ambiguous dead letters", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (r *Resolver) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// Once probes the due dead letters once and returns how many it settled.
func (r *Resolver) Once(ctx context.Context) (int, error) {
	batch := r.Batch
	if batch <= 0 {
		batch = 100
	}
	ds, err := store.DueProbes(ctx, r.DB, batch)
	if err != nil {
		return 0, err
	}
	settled := 0
	for _, d := range ds {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := r.Gateway.GetCharge(pctx, &gatewayv1.GetChargeRequest{IdempotencyKey: d.ID.String()})
		cancel()
		m := store.Move{ID: d.ID, By: payment.Resolver, Actor: "reconciler", Action: "RESOLVE_AMBIGUOUS"}
		switch {
		case status.Code(err) == codes.NotFound:
			m.To, m.Redrive, m.Reason = payment.Pending, true, "the gateway has no charge under its key: retried with the same key"
		case err != nil:
			if err := r.postpone(ctx, d.ID, d.DueTime, d.Probes, err); err != nil {
				return settled, err
			}
			continue
		case resp.GetCharge().GetStatus() == gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED:
			c := resp.GetCharge()
			m.To, m.GatewayRef, m.Amount, m.Currency = payment.Completed, c.GetChargeId(), c.GetAmount(), c.GetCurrency()
			m.Reason = "the gateway settled charge " + c.GetChargeId()
		default:
			c := resp.GetCharge()
			m.To, m.LastError = payment.Failed, "declined: "+c.GetDeclineReason()
			m.Reason = "the gateway declined charge " + c.GetChargeId()
		}
		if _, err := store.Apply(ctx, r.DB, m); err != nil {
			if err == store.ErrNotMoved {
				// Moved meanwhile (an operator, a webhook), or the gateway
				// charged another amount: the daily run reports that one.
				if m.Amount > 0 {
					_ = r.postpone(ctx, d.ID, d.DueTime, d.Probes, fmt.Errorf("gateway charge does not match the payment's amount"))
				}
				continue
			}
			return settled, err
		}
		r.Metrics.resolvedTo(m.To)
		settled++
	}
	return settled, nil
}

func (r *Resolver) postpone(ctx context.Context, id uuid.UUID, due time.Time, probes int32, cause error) error {
	base, maxB := r.Backoff, r.MaxBackoff
	if base <= 0 {
		base = 10 * time.Second
	}
	if maxB <= 0 {
		maxB = time.Hour
	}
	d := base << min(probes, 20)
	if d <= 0 || d > maxB {
		d = maxB
	}
	return store.PostponeProbe(ctx, r.DB, id, due, probes, d, "probe: "+cause.Error())
}
