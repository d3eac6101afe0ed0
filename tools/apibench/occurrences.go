package apibench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/engine/planner"
)

// occurrencesLead is the time the occurrence spike needs before its due
// time: the schedules written, then planned (about 4,000 a second here).
func occurrencesLead(n int) time.Duration {
	return 20*time.Second + time.Duration(n)*time.Second/2500
}

// makeOccurrences makes n monthly schedules whose first occurrence falls
// due at due, and plans them with the planner: the spike's payments are
// then n occurrences of recurring schedules, as on the 1st of a month,
// instead of n payments created through the API.
func makeOccurrences(ctx context.Context, dbURL string, n int, due time.Time) error {
	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	start := due.UTC().Format("2006-01-02T15:04:05")
	if _, err := db.Exec(ctx, `
INSERT INTO schedules (id, tenant, payer, payee, amount_minor, currency, rrule, start_local, time_zone, next_at)
SELECT gen_random_uuid(), 'bench', 'paybench', 'payee-' || g, 100 + g % 1000, 'USD', 'FREQ=MONTHLY', $1, 'UTC', $2
FROM generate_series(1, $3) AS g`, start, due, n); err != nil {
		return fmt.Errorf("write schedules: %w", err)
	}
	p, err := planner.New(planner.Config{Horizon: time.Until(due) + time.Minute, Interval: time.Second, Batch: 2000, Grace: time.Hour},
		db, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	// payments-api's own planner plans beside this one (each skips the
	// schedules the other holds): done once every occurrence is made.
	var made int
	for deadline := time.Now().Add(time.Until(due)); ; {
		if _, err := p.Pass(ctx); err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		if err := db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE schedule_id IS NOT NULL AND due_time = $1`, due).Scan(&made); err != nil {
			return err
		}
		if made == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("planned %d occurrences due at %s by then, want %d", made, due, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
