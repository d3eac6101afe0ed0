// Command reaper takes back expired leases (the next attempt asks the
// gateway first), keeps partitions ahead, forgets old idempotency keys and
// exports the schedule's health gauges.
package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/paysched/paysched/pkg/engine/reaper"
	"github.com/paysched/paysched/pkg/platform/svc"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "reaper", HTTPAddr: "127.0.0.1:9210"})
	interval := cmd.Duration("interval", 2*time.Second, "lease scan and gauge interval")
	horizon := cmd.Duration("horizon", 365*24*time.Hour, "keep partitions this far ahead")
	retention := cmd.Duration("retention", 0, "drop partitions older than this (0: keep)")
	keyTTL := cmd.Duration("idempotency-key-ttl", 7*24*time.Hour, "forget idempotency keys after this")
	cmd.Main(func(ctx context.Context, log *slog.Logger) error {
		cfg := reaper.Config{Interval: *interval, Horizon: *horizon, Retention: *retention, KeyTTL: *keyTTL, Batch: 1000}
		if err := cfg.Validate(); err != nil {
			return err
		}
		return cmd.RunWorker(ctx, log, 4, func(d svc.Deps) (svc.Worker, error) {
			return reaper.New(cfg, d.Pool, d.Registry, log)
		}, svc.CustomPlans)
	})
}
