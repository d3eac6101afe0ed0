// Command payments-api serves the public scheduling API: gRPC on
// --grpc-addr and REST (grpc-gateway) on --http-addr. It holds the payer's
// side only: no gateway access and no admin power (admin-api has those).
// Every flag has a PAYSCHED_* environment equivalent; the defaults suit
// `make up`.
package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/services/payments-api/paymentsserver"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "payments-api", HTTPAddr: "127.0.0.1:8080", HTTPUsage: "REST listen address"})
	dbConns := cmd.Int("db-max-conns", 32, "database pool size")
	metricsAddr := cmd.String("metrics-addr", "127.0.0.1:9190", "/metrics and /healthz listen address: internal, apart from the API's ports")
	grpcAddr := cmd.String("grpc-addr", "127.0.0.1:9090", "gRPC listen address")
	tokens := auth.RegisterFlags(cmd.FlagSet, false)
	currency := cmd.String("default-currency", "USD", "currency used when a request names none")
	amountCap := cmd.Int64("amount-cap", 100_000_000, "largest amount accepted, in minor units")
	horizon := cmd.Duration("horizon", 365*24*time.Hour, "how far ahead dueAt may be")
	cursorSecret := config.SecretVar(cmd.FlagSet, "cursor-secret", "HMAC key of list cursors")
	workers := cmd.Int("create-workers", 8, "concurrent statements that write coalesced single creates")
	actorRate := cmd.Float64("actor-rate", ratelimit.DefaultRate, "payments per second allowed to one actor: a request costs one, a batchCreate one per item (token bucket per actor, per instance); 0 disables the limit")
	actorBurst := cmd.Int("actor-burst", ratelimit.DefaultBurst, "payments one actor may send at once after being idle")
	hooksURL := cmd.String("webhooks-database-url", "", "the webhooks' database (migrate --webhooks-database-url), where tenants' endpoints are; empty: the tables are in --database-url")
	planHorizon := cmd.Duration("schedule-horizon", 35*24*time.Hour, "how far ahead the planner makes recurring schedules' occurrences (a month's exists, and can be seen and cancelled, before it falls due); at most --horizon")
	planInterval := cmd.Duration("planner-interval", 5*time.Second, "pause between planner passes that found little to do")
	planBatch := cmd.Int("planner-batch", 2000, "schedules one planner pass (one transaction) plans")
	planGrace := cmd.Duration("planner-grace", time.Hour, "how late an occurrence may be made and still be charged at once; later ones follow the schedule's catch-up policy")
	noPlanner := cmd.Bool("no-planner", false, "run no planner in this replica (another makes the occurrences)")
	maxPending := cmd.Int("max-pending", payments.DefaultMaxPending, "payments one actor may have scheduled and not yet due (per instance, recounted every 10 s); 0: no cap")
	cmd.Main(func(ctx context.Context, log *slog.Logger) error {
		if *hooksURL != "" {
			if err := cmd.DatabaseURL("--webhooks-database-url", *hooksURL); err != nil {
				return err
			}
		}
		authCfg, err := tokens.Config(cmd.Mode)
		if err != nil {
			return err
		}
		cursorKey, err := cmd.Secret(cursorSecret, config.DevCursorSecret)
		if err != nil {
			return err
		}
		cfg := paymentsserver.Config{
			DatabaseURL:   *cmd.DB,
			DBMaxConns:    int32(*dbConns),
			Auth:          authCfg,
			Rules:         payments.Rules{DefaultCurrency: *currency, AmountCap: *amountCap, Horizon: *horizon, MaxPending: *maxPending},
			CursorSecret:  []byte(cursorKey),
			CreateWorkers: *workers,
			RateLimit:     ratelimit.Config{Rate: *actorRate, Burst: *actorBurst},
			Reflection:    cmd.Dev,
			// A tenant's local receiver, in development only.
			LoopbackWebhooks:    cmd.Dev,
			WebhooksDatabaseURL: *hooksURL,
			Planner:             planner.Config{Horizon: *planHorizon, Interval: *planInterval, Batch: *planBatch, Grace: *planGrace},
			NoPlanner:           *noPlanner,
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		l, err := server.Listen(*grpcAddr, *cmd.HTTPAddr, *metricsAddr)
		if err != nil {
			return err
		}
		srv, err := paymentsserver.New(ctx, cfg, log)
		if err != nil {
			l.Close()
			return err
		}
		return srv.Serve(ctx, l)
	})
}
