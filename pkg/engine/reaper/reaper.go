// Package reaper keeps the schedule healthy: it takes back expired leases
// (the next attempt asks the gateway first), keeps partitions ahead (and drops
// old ones if configured), forgets old idempotency keys, and publishes the
// schedule's health gauges.
package reaper

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/store"
)

// Config tunes the reaper.
type Config struct {
	Interval time.Duration // lease scan and gauges (2s)
	// Horizon is how far ahead partitions must exist.
	Horizon time.Duration
	// Retention drops partitions whose day ended this long ago (at least
	// store.RetentionFloor, 30 days); 0 keeps all.
	Retention time.Duration
	// KeyTTL is how long idempotency keys are remembered.
	KeyTTL time.Duration
	// Batch bounds rows per statement.
	Batch int
}

// Validate reports the first configuration error.
func (c Config) Validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("--interval must be positive, got %s", c.Interval)
	case c.Horizon < 24*time.Hour:
		return fmt.Errorf("--horizon must be at least a day, got %s", c.Horizon)
	case c.Retention < 0:
		return fmt.Errorf("--retention must not be negative, got %s", c.Retention)
	case c.Retention > 0 && c.Retention < store.RetentionFloor:
		// The database refuses it too (paysched_drop_partitions_before).
		return fmt.Errorf("--retention %s is under the floor of %s: payments are kept at least that long", c.Retention, store.RetentionFloor)
	case c.KeyTTL <= 0:
		return fmt.Errorf("--idempotency-key-ttl must be positive, got %s", c.KeyTTL)
	case c.Batch < 1:
		return fmt.Errorf("batch must be at least 1, got %d", c.Batch)
	}
	return nil
}

// Reaper runs the maintenance loop.
type Reaper struct {
	cfg  Config
	db   *pgxpool.Pool
	log  *slog.Logger
	keyW int64 // seq below which keys are known expired
	// When the gauges' counts were last taken, and how long they took.
	counted   time.Time
	countTook time.Duration
	m         struct {
		oldest, backlog, processing prometheus.Gauge
		expired                     prometheus.Counter
	}
}

// New builds a reaper and registers its metrics.
func New(cfg Config, db *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) (*Reaper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("reaper config: %w", err)
	}
	r := &Reaper{cfg: cfg, db: db, log: log}
	r.m.oldest = prometheus.NewGauge(prometheus.GaugeOpts{Name: "oldest_due_pending_age_seconds", Help: "Age of the oldest due PENDING payment (0 when none)."})
	r.m.backlog = prometheus.NewGauge(prometheus.GaugeOpts{Name: "backlog", Help: "Due PENDING payments."})
	r.m.processing = prometheus.NewGauge(prometheus.GaugeOpts{Name: "processing", Help: "PROCESSING payments."})
	r.m.expired = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_lease_expiries_total", Help: "Leases taken back."})
	reg.MustRegister(r.m.oldest, r.m.backlog, r.m.processing, r.m.expired)
	return r, nil
}

// Run loops until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	r.hourly(ctx)
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	hour := time.NewTicker(time.Hour)
	defer hour.Stop()
	for {
		if _, err := r.ExpireLeases(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("expire leases", "err", err)
		}
		if err := r.gauges(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("gauges", "err", err)
		}
		select {
		case <-ctx.Done():
			r.log.Info("reaper stopped")
			return nil
		case <-hour.C:
			r.hourly(ctx)
		case <-tick.C:
		}
	}
}

func (r *Reaper) hourly(ctx context.Context) {
	now := time.Now()
	if n, err := store.EnsurePartitions(ctx, r.db, now.AddDate(0, 0, -1), now.Add(r.cfg.Horizon).AddDate(0, 0, 2)); err != nil {
		r.log.Error("ensure partitions", "err", err)
	} else if n > 0 {
		r.log.Info("created partitions", "count", n)
	}
	if r.cfg.Retention > 0 {
		if n, err := r.DropOldPartitions(ctx, now.Add(-r.cfg.Retention)); err != nil {
			r.log.Error("drop old partitions", "err", err)
		} else if n > 0 {
			r.log.Info("dropped partitions", "count", n)
		}
	}
	if n, err := r.ExpireKeys(ctx, now.Add(-r.cfg.KeyTTL)); err != nil {
		r.log.Error("expire idempotency keys", "err", err)
	} else if n > 0 {
		r.log.Info("expired idempotency keys", "count", n)
	}
}

// ExpireLeases takes back every expired lease and returns how many.
func (r *Reaper) ExpireLeases(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := store.ExpireLeases(ctx, r.db, r.cfg.Batch)
		if err != nil {
			return total, err
		}
		total += n
		r.m.expired.Add(float64(n))
		if n > 0 {
			r.log.Warn("took back expired leases", "count", n)
		}
		if n < r.cfg.Batch {
			return total, nil
		}
	}
}

func (r *Reaper) gauges(ctx context.Context) error {
	// The oldest due age is cheap, so it is fresh every tick (it is what
	// the lateness alert watches).
	oldest, err := store.OldestDueAge(ctx, r.db)
	if err != nil {
		return err
	}
	r.m.oldest.Set(oldest.Seconds())
	now := time.Now()
	if !countDue(now, r.counted, r.countTook, r.cfg.Interval) {
		return nil
	}
	// The counts read every due and every PROCESSING row: at a spike of a
	// million that took ~250 ms of a database core, every 2 s, competing
	// with the executions it counts.
	c, err := store.Count(ctx, r.db)
	if err != nil {
		return err
	}
	r.counted, r.countTook = now, time.Since(now)
	r.m.backlog.Set(float64(c.Backlog))
	r.m.processing.Set(float64(c.Processing))
	return nil
}

// countBudget bounds the time the gauges' counts take: at most one part in
// countBudget of the time between them. At one in 20 the counts took ~5%
// of the database's CPU during a spike of 200,000 (a count of 72 ms every
// 1.4 s), as much as a twentieth of the payments; the oldest due age,
// which the lateness alert reads, stays fresh every tick regardless.
const countBudget = 100

// countDue says whether the counts are due at now, given when they were
// last taken and how long that took: every interval while they are cheap,
// less often as they grow (a 250 ms count runs every 25 s, not every 2 s).
func countDue(now, last time.Time, took, interval time.Duration) bool {
	return last.IsZero() || now.Sub(last) >= max(interval, countBudget*took)
}

// ExpireKeys forgets idempotency records created before cutoff, walking
// payment_index in seq order from a watermark.
func (r *Reaper) ExpireKeys(ctx context.Context, cutoff time.Time) (int, error) {
	total := 0
	for {
		n, w, err := store.ExpireKeys(ctx, r.db, r.keyW, cutoff, r.cfg.Batch)
		if err != nil {
			return total, err
		}
		r.keyW = w
		total += n
		// The first key too young to expire ends the walk.
		if n < r.cfg.Batch {
			return total, nil
		}
	}
}

// DropOldPartitions drops daily partitions that ended before cutoff.
func (r *Reaper) DropOldPartitions(ctx context.Context, cutoff time.Time) (int, error) {
	return store.DropPartitionsBefore(ctx, r.db, cutoff)
}
