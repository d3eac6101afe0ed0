// Package schedbench measures the planner: it writes N monthly schedules
// across every zone Go knows that Postgres knows too (hundreds), all
// falling due at 09:00 local on the first of next month, then runs
// planners until each has made its occurrence, and checks that every
// schedule has exactly one.
package schedbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/store"
)

// Config is a run's.
type Config struct {
	DatabaseURL string
	Schedules   int
	// Planners run at once (payments-api replicas), each its own pool.
	Planners int
	Batch    int
	Out      io.Writer
}

// Result is a run's figures.
type Result struct {
	Zones, Planned, Made, Duplicates, Gaps int
	Seconds                                float64
	// CPUSeconds is this process's (the planners') CPU, apart from
	// Postgres's.
	CPUSeconds float64
}

// PlannedPerSecond is schedules planned per second of wall time.
func (r Result) PlannedPerSecond() float64 { return float64(r.Planned) / r.Seconds }

// seedSQL writes the schedules: zone i mod len(zones), each with its first
// occurrence at 09:00 local on the first of next month (the planner's
// place says none was made yet).
const seedSQL = `
INSERT INTO schedules (id, tenant, payer, payee, amount_minor, currency, rrule, start_local, time_zone, next_at, state)
SELECT gen_random_uuid(), 'bench', 'payer-' || (g % 1000), 'payee-' || (g % 5000), 100 + g % 900, 'USD', 'FREQ=MONTHLY',
       to_char(m, 'YYYY-MM-DD') || 'T09:00:00', z.zone, (m + interval '9 hours') AT TIME ZONE z.zone, 'ACTIVE'
FROM generate_series(0, $1 - 1) AS g
CROSS JOIN (SELECT date_trunc('month', now()::date + interval '1 month')::timestamp AS m) mm
JOIN unnest($2::text[]) WITH ORDINALITY AS z(zone, n) ON z.n = g % cardinality($2::text[]) + 1`

// Run seeds, plans and checks.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	zones, err := zonesBoth(ctx, pool)
	if err != nil {
		return res, err
	}
	res.Zones = len(zones)
	now := time.Now()
	if _, err := store.EnsurePartitions(ctx, pool, now.AddDate(0, 0, -1), now.AddDate(0, 0, 70)); err != nil {
		return res, fmt.Errorf("partitions: %w", err)
	}
	start := time.Now()
	if _, err := pool.Exec(ctx, seedSQL, cfg.Schedules, zones); err != nil {
		return res, fmt.Errorf("seed: %w", err)
	}
	fmt.Fprintf(cfg.Out, "seeded %d monthly schedules in %d zones in %s\n", cfg.Schedules, len(zones), time.Since(start).Round(time.Second))
	if _, err := pool.Exec(ctx, `ANALYZE schedules`); err != nil {
		return res, err
	}
	// Horizon: past the first of next month in every zone.
	horizon := time.Until(time.Date(now.Year(), now.Month()+1, 3, 0, 0, 0, 0, time.UTC))
	cpu0 := cpuSeconds()
	start = time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range cfg.Planners {
		ppool, err := pgxpool.New(ctx, cfg.DatabaseURL)
		if err != nil {
			return res, err
		}
		defer ppool.Close()
		p, err := planner.New(planner.Config{Horizon: horizon, Interval: time.Second, Batch: cfg.Batch, Grace: time.Hour},
			ppool, nil, slog.New(slog.NewTextHandler(io.Discard, nil)).With("planner", i))
		if err != nil {
			return res, err
		}
		wg.Go(func() {
			for {
				n, err := p.Pass(ctx)
				mu.Lock()
				res.Planned += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil || n == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.CPUSeconds = cpuSeconds() - cpu0
	if firstErr != nil {
		return res, firstErr
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payments WHERE schedule_id IS NOT NULL`).Scan(&res.Made); err != nil {
		return res, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM payments WHERE schedule_id IS NOT NULL
		GROUP BY schedule_id, occurrence HAVING count(*) > 1) d`).Scan(&res.Duplicates); err != nil {
		return res, err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM schedules s WHERE NOT EXISTS
		(SELECT 1 FROM schedule_occurrences o WHERE o.schedule_id = s.id AND o.occurrence = s.start_local)`).Scan(&res.Gaps); err != nil {
		return res, err
	}
	return res, nil
}

// zonesBoth are the IANA Area/City zones both Go's tzdata and Postgres's
// know.
func zonesBoth(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT name FROM pg_timezone_names WHERE name ~ '^(Africa|America|Antarctica|Asia|Atlantic|Australia|Europe|Indian|Pacific)/' ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var z string
		if err := rows.Scan(&z); err != nil {
			return nil, err
		}
		if _, err := time.LoadLocation(z); err == nil && !strings.Contains(z, "posix") {
			out = append(out, z)
		}
	}
	return out, rows.Err()
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
