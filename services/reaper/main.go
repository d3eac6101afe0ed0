// Command reaper takes back expired leases (the next attempt asks the
// gateway first), keeps partitions ahead, forgets old idempotency keys and
// exports the schedule's health gauges.
package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/paysched/paysched/pkg/engine/reaper"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/svc"
)

func main() {
	fs := flag.NewFlagSet("reaper", flag.ExitOnError)
	base := config.RegisterService(fs, "database-url", config.LocalDatabaseURL, "Postgres URL")
	httpAddr := fs.String("http-addr", "127.0.0.1:9210", "metrics and health listen address")
	interval := fs.Duration("interval", 2*time.Second, "lease scan and gauge interval")
	horizon := fs.Duration("horizon", 365*24*time.Hour, "keep partitions this far ahead")
	retention := fs.Duration("retention", 0, "drop partitions older than this (0: keep)")
	keyTTL := fs.Duration("idempotency-key-ttl", 7*24*time.Hour, "forget idempotency keys after this")
	svc.Main("reaper", fs, func(ctx context.Context, log *slog.Logger) error {
		if err := base.Start(log); err != nil {
			return err
		}
		cfg := reaper.Config{Interval: *interval, Horizon: *horizon, Retention: *retention, KeyTTL: *keyTTL, Batch: 1000}
		if err := cfg.Validate(); err != nil {
			return err
		}
		return svc.WorkerService{Name: "reaper", Log: log, DatabaseURL: *base.DB, MaxConns: 4, PoolOptions: []svc.PoolOption{svc.CustomPlans},
			HTTPAddr: *httpAddr}.Run(ctx, func(d svc.Deps) (svc.Worker, error) { return reaper.New(cfg, d.Pool, d.Registry, log) })
	})
}
