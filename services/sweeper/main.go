// Command sweeper claims due payments and dispatches them to executors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/paysched/paysched/pkg/engine/fair"
	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/pkg/engine/sweeper"
	"github.com/paysched/paysched/pkg/platform/mtls"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "sweeper", HTTPAddr: "127.0.0.1:9200"})
	id := cmd.String("id", obs.InstanceID("sweeper"), "lease owner id")
	executors := cmd.String("executors", "127.0.0.1:9100,127.0.0.1:9110", "executor addresses, or a DNS name:port resolving to all of them")
	interval := cmd.Duration("interval", 100*time.Millisecond, "poll interval when nothing more is due (an idle claim is one index probe; it bounds the lateness of a lone payment)")
	claimCooldown := cmd.Duration("claim-cooldown", 100*time.Millisecond, "pause after a claim that found fewer due rows than it asked for (at most --interval; by default 100ms or --interval if shorter): at a steady rate the next claim takes what fell due meanwhile in one statement; after a claim that found nothing, the sweeper wakes when the next payment falls due instead")
	batch := cmd.Int("batch", 500, "rows per claim")
	lease := cmd.Duration("lease", 2*time.Minute, "lease per claim")
	slots := cmd.Int("slots", 2, "batches in flight per executor")
	ceiling := cmd.Float64("rate-ceiling", 0, "cluster-wide charges per second towards the gateway (0: none)")
	threshold := cmd.Float64("breaker-threshold", 0.5, "share of failed attempts that opens the circuit breaker")
	cooldown := cmd.Duration("breaker-cooldown", 2*time.Second, "first open period of the breaker")
	execTLS := mtls.RegisterClient(cmd.FlagSet, "executor")
	resolveEvery := cmd.Duration("resolve-every", 15*time.Second, "how often the executors' name is resolved again (rollouts, autoscaling)")
	unfair := cmd.Bool("unfair", false, "claim in due order only, whoever the tenant (no fair shares, no tenant caps)")
	walk := cmd.Int("fair-walk", 256, "due tenants one window of a claim holds at most (more are reached in the next windows, the longest waiting first)")
	maxInflight := cmd.Int("tenant-max-inflight", 0, "default cap on a tenant's payments in flight across sweepers (0: none; payctl tenants set overrides it)")
	maxRate := cmd.Float64("tenant-max-rate", 0, "default cap on a tenant's claims per second, across sweepers (0: none; payctl tenants set overrides it)")
	cmd.Main(func(ctx context.Context, log *slog.Logger) error {
		if err := cmd.Require(execTLS.On(), errors.New("the executor hop is plaintext: production needs --executor-ca-file, --executor-cert-file and --executor-key-file (mutual TLS)")); err != nil {
			return err
		}
		// A tenth of a second of burst keeps every wall-clock second under the ceiling.
		bucket := pacing.Bucket{Name: "gateway", Rate: *ceiling, Burst: max(1, *ceiling/10)}
		set := map[string]bool{}
		cmd.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["claim-cooldown"] {
			// The default never exceeds a shorter --interval.
			*claimCooldown = min(*claimCooldown, *interval)
		}
		cfg := sweeper.Config{
			ID: *id, Interval: *interval, Cooldown: *claimCooldown, Batch: *batch, Lease: *lease, Executors: strings.Split(*executors, ","),
			Resolve: *resolveEvery, Slots: *slots, Bucket: bucket, Grace: 60 * time.Second,
			Breaker: &sweeper.Breaker{Threshold: *threshold, MinSamples: 50, Cooldown: *cooldown, MaxCooldown: 30 * time.Second, ProbeSize: 10},
			Fair:    fair.Config{Unfair: *unfair, Walk: *walk, Default: fair.Limits{Weight: 1, MaxInflight: *maxInflight, MaxRate: *maxRate}},
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		transport, err := execTLS.DialOption()
		if err != nil {
			return fmt.Errorf("executor TLS: %w", err)
		}
		cfg.Transport = transport
		return cmd.RunWorker(ctx, log, 8, func(d svc.Deps) (svc.Worker, error) {
			return sweeper.New(cfg, d.Pool, d.Registry, log)
		}, svc.CustomPlans)
	})
}
