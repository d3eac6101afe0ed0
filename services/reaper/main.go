// Command reaper takes back expired leases, dead-letters spent budgets,
// keeps partitions ahead, forgets old idempotency keys and exports the
// schedule's health gauges.
package main

import (
	"flag"
	"time"

	"github.com/paysched/paysched/pkg/obs"
	"github.com/paysched/paysched/pkg/reaper"
	"github.com/paysched/paysched/pkg/retry"
	"github.com/paysched/paysched/pkg/svc"
)

func main() {
	fs := flag.NewFlagSet("reaper", flag.ExitOnError)
	dbURL := fs.String("database-url", "postgres://postgres@127.0.0.1:55432/paysched?sslmode=disable", "Postgres URL")
	httpAddr := fs.String("http-addr", "127.0.0.1:9210", "metrics and health listen address")
	interval := fs.Duration("interval", 2*time.Second, "lease scan and gauge interval")
	maxRetries := fs.Int("max-retries", len(retry.DefaultSchedule), "retry budget (the executors' backoff length)")
	horizon := fs.Duration("horizon", 365*24*time.Hour, "keep partitions this far ahead")
	retention := fs.Duration("retention", 0, "drop partitions older than this (0: keep)")
	keyTTL := fs.Duration("idempotency-key-ttl", 7*24*time.Hour, "forget idempotency keys after this")
	orphan := fs.Duration("orphan-after", 5*time.Minute, "close unfinished attempts whose claim was taken back this long ago (> lease + gateway timeouts)")
	ctx, log, stop := svc.Boot("reaper", fs)
	defer stop()
	pool, err := svc.Pool(ctx, *dbURL, 4)
	if err != nil {
		svc.Fatal(log, err)
	}
	defer pool.Close()
	reg := obs.Registry()
	r := reaper.New(reaper.Config{Interval: *interval, MaxRetries: *maxRetries, Horizon: *horizon,
		Retention: *retention, KeyTTL: *keyTTL, Batch: 1000, OrphanAfter: *orphan}, pool, reg, log)
	if err := (svc.Server{Name: "reaper", Log: log, Registry: reg, HTTPAddr: *httpAddr, Ready: pool.Ping}).Run(ctx, r.Run); err != nil {
		svc.Fatal(log, err)
	}
}
