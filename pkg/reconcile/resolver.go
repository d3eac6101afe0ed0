package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/periodic"
	"github.com/paysched/paysched/pkg/store"
)

// Resolver settles payments dead-lettered as AMBIGUOUS_UNRESOLVED (the
// executor could not learn whether the gateway charged them) by asking the
// gateway, with backoff, until it gives a definitive answer:
//
//   - a succeeded charge: COMPLETED;
//   - a declined one: FAILED;
//   - an undecided one past its bound (Bounds): cancelled at the gateway,
//     then FAILED AUTHENTICATION_REQUIRED or PSP_TIMEOUT;
//   - a proven absence (a strongly consistent read found no charge under
//     the key): PENDING again with a fresh budget, still asking first.
//
// Anything else (no answer, an absence the gateway could not prove, an
// undecided charge within its bound, a charge that is not this payment's)
// is asked again later, with backoff. A row that cannot be moved is
// postponed like an unanswered one, so it never holds the rows behind it.
type Resolver struct {
	DB      *pgxpool.Pool
	Gateway gateway.Gateway
	// Bounds for undecided charges (zero: never cancelled).
	Bounds gateway.Bounds
	// Interval between scans (default 5s).
	Interval time.Duration
	// Backoff after an unanswered probe, doubling up to MaxBackoff
	// (defaults 10s and 1h).
	Backoff, MaxBackoff time.Duration
	// MaxRequest is the gateway's longest request (gateway.Charger): an
	// absence proven sooner after a dead letter's last request is not yet
	// one, and its next probe waits.
	MaxRequest time.Duration
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
	periodic.RunAtOnce(ctx, r.Interval, func(ctx context.Context) {
		if _, err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.log().Warn("resolve ambiguous dead letters", "err", err)
		}
	})
	return nil
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
	charger := &gateway.Charger{Gateway: r.Gateway, ProbeTimeout: 5 * time.Second,
		ActionTimeout: r.Bounds.Action, ProcessingTimeout: r.Bounds.Processing, MaxRequest: r.MaxRequest}
	for _, d := range ds {
		// Read strictly: only a charge naming this payment's key, amount
		// and currency with an explicit status settles it.
		res := charger.Probe(ctx, gateway.ChargeInput{ID: d.ID.String(), Payer: d.Payer, Amount: d.Amount, Currency: d.Currency, DueAt: d.DueTime,
			SentBy: d.SentBy})
		m := store.OutOfBandMove{ID: d.ID, By: payment.Resolver, Actor: "reconciler", Action: "RESOLVE_AMBIGUOUS"}
		switch {
		case res.Absent:
			// Proven: no charge under the key. The next attempt still asks
			// first (the move sets probe_first).
			m.To, m.Redrive, m.Reason = payment.Pending, true, "the gateway proved it holds no charge under its key: retried with the same key"
		case res.Found && res.Outcome == payment.Succeeded:
			m.To, m.GatewayRef, m.Amount, m.Currency = payment.Completed, res.Ref, d.Amount, d.Currency
			m.Reason = "the gateway settled charge " + res.Ref
		case res.Found && res.Outcome == payment.Declined:
			m.To, m.LastError, m.FailReason = payment.Failed, res.Error, res.FailReason
			m.Reason = "the gateway declined charge " + res.Ref
			if res.FailReason != payment.FailDeclined {
				m.Reason = res.Error
			}
		default:
			// No answer, an unproven absence, an undecided or unknown
			// status, or a charge that is not this payment's: ask again
			// later (a mismatch is the daily run's to report).
			if err := r.postpone(ctx, d.ID, d.DueTime, d.Probes, errors.New(res.Error)); err != nil {
				return settled, err
			}
			continue
		}
		if _, err := store.Apply(ctx, r.DB, m); err != nil {
			if errors.Is(err, store.ErrNotMoved) {
				// Moved meanwhile (an operator, a webhook).
				continue
			}
			// This row cannot be moved (the database refuses it): count it,
			// push its next probe back, and go on with the others.
			r.Metrics.resolveFailed()
			r.log().Error("resolve ambiguous dead letter", "payment", d.ID, "to", m.To, "err", err)
			if perr := r.postpone(ctx, d.ID, d.DueTime, d.Probes, fmt.Errorf("could not move it to %s: %w", m.To, err)); perr != nil {
				return settled, perr
			}
			continue
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
	return store.PostponeProbe(ctx, r.DB, id, due, probes, d, gateway.Clean("probe: "+cause.Error(), 1000))
}
