package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
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

// dueProbesSQL finds ambiguous dead letters whose next probe is due. Dead
// letters are always past due, so only partitions up to now are read.
const dueProbesSQL = `
SELECT id, due_time, amount_minor, currency, probes FROM payments
WHERE status = 'DEAD_LETTERED' AND dead_letter_reason = 'AMBIGUOUS_UNRESOLVED'
  AND due_time <= now() AND run_at <= now()
ORDER BY run_at LIMIT $1`

// postponeSQL schedules the next probe; fenced on the status so a payment
// moved meanwhile is left alone.
const postponeSQL = `
UPDATE payments SET probes = probes + 1, run_at = now() + make_interval(secs => $3), last_error = $4
WHERE id = $1 AND due_time = $5
  AND status = 'DEAD_LETTERED' AND probes = $2`

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
	rows, err := r.DB.Query(ctx, dueProbesSQL, batch)
	if err != nil {
		return 0, fmt.Errorf("due probes: %w", err)
	}
	type dead struct {
		id       uuid.UUID
		due      time.Time
		amount   int64
		currency string
		probes   int32
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dead, error) {
		var d dead
		err := row.Scan(&d.id, &d.due, &d.amount, &d.currency, &d.probes)
		return d, err
	})
	if err != nil {
		return 0, fmt.Errorf("due probes: %w", err)
	}
	settled := 0
	for _, d := range ds {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := r.Gateway.GetCharge(pctx, &gatewayv1.GetChargeRequest{IdempotencyKey: d.id.String()})
		cancel()
		m := Move{ID: d.id, From: []string{"DEAD_LETTERED"}, Actor: "reconciler", Action: "RESOLVE_AMBIGUOUS"}
		switch {
		case status.Code(err) == codes.NotFound:
			m.To, m.Redrive, m.Reason = "PENDING", true, "the gateway has no charge under its key: retried with the same key"
		case err != nil:
			if err := r.postpone(ctx, d.id, d.due, d.probes, err); err != nil {
				return settled, err
			}
			continue
		case resp.GetCharge().GetStatus() == gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED:
			c := resp.GetCharge()
			m.To, m.GatewayRef, m.Amount, m.Currency = "COMPLETED", c.GetChargeId(), c.GetAmount(), c.GetCurrency()
			m.Reason = "the gateway settled charge " + c.GetChargeId()
		default:
			c := resp.GetCharge()
			m.To, m.LastError = "FAILED", "declined: "+c.GetDeclineReason()
			m.Reason = "the gateway declined charge " + c.GetChargeId()
		}
		if _, err := Apply(ctx, r.DB, m); err != nil {
			if err == ErrNotMoved {
				// Moved meanwhile (an operator, a webhook), or the gateway
				// charged another amount: the daily run reports that one.
				if m.Amount > 0 {
					_ = r.postpone(ctx, d.id, d.due, d.probes, fmt.Errorf("gateway charge does not match the payment's amount"))
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
	if _, err := r.DB.Exec(ctx, postponeSQL, id, probes, d.Seconds(), "probe: "+cause.Error(), due); err != nil {
		return fmt.Errorf("postpone probe of %s: %w", id, err)
	}
	return nil
}
