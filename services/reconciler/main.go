// Command reconciler proves the books against the gateway: it reconciles
// the previous UTC day every day (and any day on demand through the admin
// API), settles ambiguous dead letters by probing the gateway, and receives
// the gateway's signed webhooks on POST /webhooks/gateway.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/pkg/store"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "reconciler", HTTPAddr: "127.0.0.1:9420",
		HTTPUsage: "webhook (and health) listen address: the one the gateway reaches"})
	metricsAddr := cmd.String("metrics-addr", "127.0.0.1:9421", "/metrics and /healthz listen address: internal, apart from the webhooks'")
	gwf := dial.Register(cmd.FlagSet, "127.0.0.1:9300")
	runAt := cmd.String("run-at", "00:30", "UTC time of day at which the previous day is reconciled")
	retry := cmd.Duration("run-retry", 10*time.Minute, "delay before retrying a failed daily run")
	probeEvery := cmd.Duration("probe-interval", 5*time.Second, "how often ambiguous dead letters are looked at")
	probeBackoff := cmd.Duration("probe-backoff", 10*time.Second, "first delay after an unanswered probe (doubling, up to 1h)")
	hooks := cmd.Bool("webhooks", true, "receive the gateway's signed webhooks on POST /webhooks/gateway (needs --webhook-secret)")
	secret := config.SecretVar(cmd.FlagSet, "webhook-secret", "HMAC-SHA256 secret of the gateway's webhooks")
	tolerance := cmd.Duration("webhook-tolerance", 5*time.Minute, "accepted age of a webhook's signed timestamp")
	stripeSecretFile := cmd.String("stripe-webhook-secret-file", "", "file holding the Stripe endpoint's signing secret (whsec_...); set, POST /webhooks/stripe receives Stripe's events (needs --gateway=stripe: their livemode must be the key's)")
	stripeAccount := cmd.String("stripe-account", "", "our Stripe account id (acct_...) when Stripe's events name it; empty: an event naming any account (a connected account's) is ignored")
	hookAccount := cmd.String("webhook-account", "", "the account gateway.v1 webhooks must name; empty: they name none (gateway-sim)")
	hookLive := cmd.Bool("webhook-livemode", false, "the livemode gateway.v1 webhooks must carry: true for a gateway that moves real money (gateway-sim sends false)")
	bounds := gateway.RegisterBounds(cmd.FlagSet)
	// The flags are checked before the mode and database URL (cmd.Start).
	svc.Main("reconciler", cmd.FlagSet, func(ctx context.Context, log *slog.Logger) error {
		at, err := reconcile.ParseTimeOfDay(*runAt)
		if err != nil {
			return fmt.Errorf("--run-at: %w", err)
		}
		for name, d := range map[string]time.Duration{"--run-retry": *retry, "--probe-interval": *probeEvery,
			"--probe-backoff": *probeBackoff, "--webhook-tolerance": *tolerance} {
			if d <= 0 {
				return fmt.Errorf("%s must be positive, got %s", name, d)
			}
		}
		if err := bounds.Validate(); err != nil {
			return err
		}
		if err := cmd.Start(log); err != nil {
			return err
		}
		if err := gwf.ValidateFor(cmd.Mode); err != nil {
			return err
		}
		hookSecret := ""
		if *hooks {
			// Development without a secret runs without the receiver; in
			// production a missing secret is a mistake, not a choice.
			if hookSecret, err = cmd.Secret(secret, ""); err != nil {
				return fmt.Errorf("%w; --webhooks=false runs without the gateway's webhooks", err)
			}
		}
		var stripeSecret string
		stripeLive := false
		if *stripeSecretFile != "" {
			if stripeSecret, err = config.ReadSecret(*stripeSecretFile); err != nil {
				return fmt.Errorf("--stripe-webhook-secret-file: %w", err)
			}
			if !cmd.Dev {
				if err := config.CheckSecret("--stripe-webhook-secret-file", stripeSecret); err != nil {
					return err
				}
			}
			// Stripe's events are checked against our mode: the key's.
			if gwf.Kind != dial.KindStripe {
				return errors.New("--stripe-webhook-secret-file needs --gateway=stripe: Stripe's events are applied only in the Stripe key's mode (livemode)")
			}
			if stripeLive, err = gwf.StripeLive(); err != nil {
				return err
			}
		}
		// Custom plans: a webhook's move names one payment's due time, and
		// a cached generic plan locked and probed every daily partition at
		// every gateway webhook (four backends busy through make demo).
		pool, err := svc.Pool(ctx, *cmd.DB, 8, svc.CustomPlans)
		if err != nil {
			return err
		}
		defer pool.Close()
		gw, err := gwf.Open(ctx, svc.FastReconnect(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			return err
		}
		defer gw.Close()
		// Proofs of absence hold only within the contract's clock skew
		// margin: a gateway whose clock is further off is refused.
		if err := gateway.CheckClock(ctx, gw, func(ctx context.Context) (time.Time, error) { return store.Now(ctx, pool) }, time.Minute); err != nil {
			return err
		}
		reg := obs.Registry()
		m := reconcile.NewMetrics(reg)
		if err := m.Restore(ctx, pool); err != nil {
			return err
		}
		runner := &reconcile.Runner{DB: pool, Gateway: gw, Metrics: m, Log: log}
		resolver := &reconcile.Resolver{DB: pool, Gateway: gw, Bounds: *bounds, Interval: *probeEvery, Backoff: *probeBackoff,
			MaxRequest: gwf.MaxRequestTime(), Metrics: m, Log: log}
		srv := svc.Server{Name: "reconciler", Log: log, Registry: reg, HTTPAddr: *cmd.HTTPAddr, InternalAddr: *metricsAddr,
			Ready: pool.Ping}
		recv := &reconcile.Receiver{DB: pool, Secret: []byte(hookSecret), Tolerance: *tolerance, Metrics: m, Log: log,
			Account: *hookAccount, Livemode: *hookLive, StripeAccount: *stripeAccount, StripeLivemode: stripeLive}
		srv.Handlers = map[string]http.Handler{}
		if hookSecret != "" {
			srv.Handlers["POST /webhooks/gateway"] = recv
		} else {
			log.Warn("gateway webhooks are not received (--webhooks=false, or no --webhook-secret in development)")
		}
		if stripeSecret != "" {
			recv.StripeSecret = []byte(stripeSecret)
			srv.Handlers["POST /webhooks/stripe"] = recv.Stripe()
		}
		work := func(ctx context.Context) error {
			g, ctx := errgroup.WithContext(ctx)
			g.Go(func() error { return runner.Daily(ctx, at, *retry) })
			g.Go(func() error { return resolver.Run(ctx) })
			if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
		return srv.Run(ctx, work)
	})
}
