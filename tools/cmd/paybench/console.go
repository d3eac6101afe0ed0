package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/tools/consolebench"
)

// consoleRun is make bench-console: seed n payments, time each page
// `requests` times; the last line names the slowest page's p99.
func consoleRun(dbURL string, n, requests int) int {
	return withDB(dbURL, func(ctx context.Context, db *pgxpool.Pool) int {
		now := time.Now()
		if err := consolebench.Seed(ctx, db, n, now, os.Stdout); err != nil {
			return fail(err)
		}
		// The pages run on a pool configured as admin-api's (svc.CustomPlans:
		// every statement planned for its values), so the figures are the
		// console's as it runs; seeding needs no such thing.
		served, err := svc.Pool(ctx, dbURL, 8, svc.CustomPlans)
		if err != nil {
			return fail(err)
		}
		defer served.Close()
		pages, err := consolebench.Run(ctx, served, n, requests, now, os.Stdout)
		if err != nil {
			return fail(err)
		}
		worst, errs := pages[0], 0
		for _, p := range pages {
			if p.P99 > worst.P99 {
				worst = p
			}
			errs += p.Errors
		}
		fmt.Printf("\nconsole seeded=%d pages=%d requests_each=%d p99_max_ms=%.1f slowest=%q errors=%d\n",
			n, len(pages), requests, float64(worst.P99.Microseconds())/1000, worst.Name, errs)
		if errs > 0 {
			return 1
		}
		return 0
	})
}
