package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/tools/webhookbench"
)

// webhooksRun is make bench-webhooks: the last line is
// `webhooks delivered= verified= p99_ms= duplicates_per_endpoint= lost=`.
// api, when set, is payments-api: the payments are scheduled and executed.
func webhooksRun(dbURL, hooksURL, brokers, api, pids string, n, rate int, timeout time.Duration) int {
	if brokers == "" {
		fmt.Fprintln(os.Stderr, "paybench: webhooks needs --kafka-brokers")
		return 2
	}
	return withDB(dbURL, func(ctx context.Context, db *pgxpool.Pool) int {
		hooks := db
		if hooksURL != "" && hooksURL != dbURL {
			var err error
			if hooks, err = pgxpool.New(ctx, hooksURL); err != nil {
				return fail(err)
			}
			defer hooks.Close()
		}
		res, err := webhookbench.Run(ctx, webhookbench.Config{DB: hooks, Schedule: db, Pids: parsePids(pids), Brokers: strings.Split(brokers, ","),
			N: n, Rate: rate, Hang: 20 * time.Second, Timeout: timeout, Out: os.Stdout, API: api})
		if err != nil {
			return fail(err)
		}
		if res.Lost > 0 {
			return 1
		}
		return 0
	})
}
