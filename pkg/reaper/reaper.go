// Package reaper keeps the schedule healthy: it takes back expired leases,
// dead-letters what has spent its budget, keeps partitions ahead (and drops
// old ones if configured), forgets old idempotency keys, and publishes the
// schedule's health gauges.
package reaper

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/migrate"
)

// Config tunes the reaper.
type Config struct {
	Interval time.Duration // lease scan and gauges (2s)
	// MaxRetries is the retry budget (the executors' backoff schedule length).
	MaxRetries int
	// Horizon is how far ahead partitions must exist.
	Horizon time.Duration
	// Retention drops partitions whose day ended this long ago; 0 keeps all.
	Retention time.Duration
	// KeyTTL is how long idempotency keys are remembered.
	KeyTTL time.Duration
	// Batch bounds rows per statement.
	Batch int
	// OrphanAfter is how old an unfinished attempt of a payment no longer
	// PROCESSING at that attempt must be before it is closed as ABANDONED.
	// It must exceed the lease plus the gateway timeouts, so that a live but
	// slow executor records its own outcome first (0: 5 minutes).
	OrphanAfter time.Duration
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
		expired, dead               prometheus.Counter
	}
}

// New builds a reaper and registers its metrics.
func New(cfg Config, db *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) *Reaper {
	if cfg.OrphanAfter <= 0 {
		cfg.OrphanAfter = 5 * time.Minute
	}
	r := &Reaper{cfg: cfg, db: db, log: log}
	r.m.oldest = prometheus.NewGauge(prometheus.GaugeOpts{Name: "oldest_due_pending_age_seconds", Help: "Age of the oldest due PENDING payment (0 when none)."})
	r.m.backlog = prometheus.NewGauge(prometheus.GaugeOpts{Name: "backlog", Help: "Due PENDING payments."})
	r.m.processing = prometheus.NewGauge(prometheus.GaugeOpts{Name: "processing", Help: "PROCESSING payments."})
	r.m.expired = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_lease_expiries_total", Help: "Leases taken back."})
	r.m.dead = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_dead_letters_total", Help: "Payments dead-lettered by the reaper."})
	reg.MustRegister(r.m.oldest, r.m.backlog, r.m.processing, r.m.expired, r.m.dead)
	return r
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
		if _, err := r.CloseOrphans(ctx); err != nil && ctx.Err() == nil {
			r.log.Error("close orphaned attempts", "err", err)
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
	if n, err := migrate.EnsurePartitions(ctx, r.db, now.AddDate(0, 0, -1), now.Add(r.cfg.Horizon).AddDate(0, 0, 2)); err != nil {
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

// expireSQL takes back expired leases, a batch at a time.
//
// Why it is safe: rows are locked (SKIP LOCKED: an executor writing its
// outcome right now wins, and the row is no longer PROCESSING after it) and
// updated only while still PROCESSING, keeping the attempt number: a late
// executor holding the old claim can write its attempt row but not the
// payment, because the next claim increments attempt. The retry uses the
// same gateway key, so a charge made before the crash is replayed, not
// repeated. A lease expiry spends budget only if the attempt was started.
const expireSQL = `
WITH expired AS (
    SELECT p.id, p.due_time, p.attempt,
           EXISTS (SELECT 1 FROM payment_attempts a WHERE a.payment_id = p.id AND a.attempt = p.attempt) AS started
    FROM payments p
    WHERE p.status = 'PROCESSING' AND p.lease_until < now()
    ORDER BY p.lease_until
    LIMIT $1
    FOR UPDATE OF p SKIP LOCKED
), moved AS (
    UPDATE payments p
    SET status = CASE WHEN e.started AND p.retries + 1 > $2 THEN 'DEAD_LETTERED' ELSE 'PENDING' END,
        dead_letter_reason = CASE WHEN e.started AND p.retries + 1 > $2 THEN 'RETRIES_EXHAUSTED' END,
        retries = p.retries + CASE WHEN e.started THEN 1 ELSE 0 END,
        run_at = GREATEST(p.run_at, now()),
        last_error = 'lease expired', lease_until = NULL, lease_owner = NULL, updated_at = now()
    FROM expired e
    WHERE p.id = e.id AND p.due_time = e.due_time AND p.status = 'PROCESSING' AND p.attempt = e.attempt
    RETURNING p.id, p.attempt, p.status
), abandoned AS (
    UPDATE payment_attempts a SET finished_at = now(), outcome = 'ABANDONED', error = 'lease expired'
    FROM moved m WHERE a.payment_id = m.id AND a.attempt = m.attempt AND a.finished_at IS NULL
)
SELECT count(*), count(*) FILTER (WHERE status = 'DEAD_LETTERED') FROM moved`

// ExpireLeases takes back every expired lease and returns how many.
func (r *Reaper) ExpireLeases(ctx context.Context) (int, error) {
	total := 0
	for {
		var n, dead int
		if err := r.db.QueryRow(ctx, expireSQL, r.cfg.Batch, r.cfg.MaxRetries).Scan(&n, &dead); err != nil {
			return total, fmt.Errorf("expire leases: %w", err)
		}
		total += n
		r.m.expired.Add(float64(n))
		r.m.dead.Add(float64(dead))
		if n > 0 {
			r.log.Warn("took back expired leases", "count", n, "dead_lettered", dead)
		}
		if n < r.cfg.Batch {
			return total, nil
		}
	}
}

// orphanSQL closes attempt rows nobody will finish: their payment has moved
// on from that attempt (the reaper took the lease back before the executor
// wrote the row, and the executor then died). Every attempt ends with an
// outcome in the audit trail. If the executor was only slow, its own
// outcome still replaces ABANDONED when it arrives (see pkg/outcome).
const orphanSQL = `
UPDATE payment_attempts a
SET finished_at = now(), outcome = 'ABANDONED', error = 'orphaned: the claim was taken back before this attempt was recorded'
WHERE a.finished_at IS NULL AND a.started_at < now() - $1::interval
  AND NOT EXISTS (
      SELECT 1 FROM payments p
      WHERE p.id = a.payment_id AND p.status = 'PROCESSING' AND p.attempt = a.attempt
        AND p.due_time = (SELECT due_time FROM payment_index i WHERE i.id = a.payment_id))`

// CloseOrphans closes orphaned attempt rows and returns how many.
func (r *Reaper) CloseOrphans(ctx context.Context) (int64, error) {
	tag, err := r.db.Exec(ctx, orphanSQL, r.cfg.OrphanAfter)
	if err != nil {
		return 0, fmt.Errorf("close orphaned attempts: %w", err)
	}
	if n := tag.RowsAffected(); n > 0 {
		r.log.Warn("closed orphaned attempts", "count", n)
	}
	return tag.RowsAffected(), nil
}

func (r *Reaper) gauges(ctx context.Context) error {
	// The oldest due age is the first entry of the sweep index: cheap, so
	// it is fresh every tick (it is what the lateness alert watches).
	var oldest float64
	err := r.db.QueryRow(ctx, `
		SELECT COALESCE(EXTRACT(epoch FROM now() - min(run_at)), 0)
		FROM payments WHERE status = 'PENDING' AND run_at <= now() AND due_time <= now()`).Scan(&oldest)
	if err != nil {
		return err
	}
	r.m.oldest.Set(oldest)
	now := time.Now()
	if !countDue(now, r.counted, r.countTook, r.cfg.Interval) {
		return nil
	}
	// The counts read every due and every PROCESSING row: at a spike of a
	// million that took ~250 ms of a database core, every 2 s, competing
	// with the executions it counts.
	var backlog, processing int64
	if err := r.db.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM payments WHERE status = 'PENDING' AND run_at <= now() AND due_time <= now()),
		       (SELECT count(*) FROM payments WHERE status = 'PROCESSING')`).Scan(&backlog, &processing); err != nil {
		return err
	}
	r.counted, r.countTook = now, time.Since(now)
	r.m.backlog.Set(float64(backlog))
	r.m.processing.Set(float64(processing))
	return nil
}

// countBudget bounds the time the gauges' counts take: at most one part in
// countBudget of the time between them.
const countBudget = 20

// countDue says whether the counts are due at now, given when they were
// last taken and how long that took: every interval while they are cheap,
// less often as they grow (a 250 ms count runs every 5 s, not every 2 s).
func countDue(now, last time.Time, took, interval time.Duration) bool {
	return last.IsZero() || now.Sub(last) >= max(interval, countBudget*took)
}

// ExpireKeys forgets idempotency records created before cutoff, walking
// payment_index in seq order (created_at grows with seq) from a watermark.
func (r *Reaper) ExpireKeys(ctx context.Context, cutoff time.Time) (int, error) {
	total := 0
	for {
		var n int
		var top *int64
		err := r.db.QueryRow(ctx, `
			WITH batch AS (
				SELECT seq, created_at FROM payment_index
				WHERE seq > $1 ORDER BY seq LIMIT $3
			), old AS (
				SELECT seq FROM batch WHERE created_at < $2
			), forgot AS (
				UPDATE payment_index i SET idempotency_key = NULL, request_hash = NULL, response = NULL
				FROM old o WHERE i.seq = o.seq AND i.idempotency_key IS NOT NULL
			)
			SELECT count(*), max(seq) FROM old`, r.keyW, cutoff, r.cfg.Batch).Scan(&n, &top)
		if err != nil {
			return total, fmt.Errorf("expire keys: %w", err)
		}
		if top != nil {
			r.keyW = *top
		}
		total += n
		// The first key too young to expire ends the walk.
		if n < r.cfg.Batch {
			return total, nil
		}
	}
}

// DropOldPartitions drops daily partitions that ended before cutoff.
func (r *Reaper) DropOldPartitions(ctx context.Context, cutoff time.Time) (int, error) {
	rows, err := r.db.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'payments'::regclass AND c.relname < $1 ORDER BY 1`,
		"payments_p"+cutoff.UTC().Format("20060102"))
	if err != nil {
		return 0, fmt.Errorf("list partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	for _, n := range names {
		if _, err := r.db.Exec(ctx, `DROP TABLE `+pgx.Identifier{n}.Sanitize()); err != nil {
			return 0, fmt.Errorf("drop %s: %w", n, err)
		}
	}
	return len(names), nil
}
