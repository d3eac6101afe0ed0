// Package paymentsserver assembles payments-api (the payers'
// PaymentsService and WebhooksService over gRPC and REST) with its Postgres
// pool, gRPC server and REST gateway, and runs it until the context ends.
// Nothing of the admin side is imported here: payments-api holds no gateway
// access and no admin power, and its binary does not even carry the code.
package paymentsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/paysched/paysched/gen/openapi"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/pkg/api/rest"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/pkg/store"
)

// Config is payments-api's configuration.
type Config struct {
	DatabaseURL  string
	DBMaxConns   int32
	Auth         auth.Config
	Rules        payments.Rules
	CursorSecret []byte
	// CreateWorkers write single creates in coalesced statements.
	CreateWorkers int
	// RateLimit is the per-actor request rate limit (off when its Rate is 0).
	RateLimit ratelimit.Config
	// Reflection serves gRPC server reflection on the API's port: for
	// development (grpcurl), never on a port the internet reaches.
	Reflection bool
	// LoopbackWebhooks lets tenants register webhook endpoints on
	// 127.0.0.1 and ::1 (development: a local receiver).
	LoopbackWebhooks bool
	// WebhooksDatabaseURL is the webhooks' database (empty: the tables
	// are in the schedule's).
	WebhooksDatabaseURL string
	// Planner makes recurring schedules' occurrences ahead (its Horizon
	// within Rules.Horizon); every replica runs one unless NoPlanner.
	Planner   planner.Config
	NoPlanner bool
}

// Server is a running payments-api.
type Server struct {
	pool    *pgxpool.Pool
	hooks   *pgxpool.Pool // the webhooks' database, when apart
	batcher *store.Batcher
	horizon time.Duration
	planner *planner.Planner
	grpc    *grpc.Server
	http    http.Handler
	ready   func(context.Context) error
	reg     *prometheus.Registry
	log     *slog.Logger
	// reflection: gRPC server reflection is served (development).
	reflection bool
}

// Validate reports the first configuration error.
func (cfg Config) Validate() error {
	switch {
	case !payment.KnownCurrency(cfg.Rules.DefaultCurrency):
		return fmt.Errorf("--default-currency %q is not an ISO 4217 code", cfg.Rules.DefaultCurrency)
	case cfg.Rules.AmountCap <= 0:
		return fmt.Errorf("--amount-cap must be positive, got %d", cfg.Rules.AmountCap)
	case cfg.Rules.Horizon <= 0:
		return fmt.Errorf("--horizon must be positive, got %s", cfg.Rules.Horizon)
	case cfg.DBMaxConns < 0:
		return fmt.Errorf("--db-max-conns must not be negative, got %d", cfg.DBMaxConns)
	case cfg.CreateWorkers < 0:
		return fmt.Errorf("--create-workers must not be negative, got %d", cfg.CreateWorkers)
	case len(cfg.CursorSecret) == 0:
		return errors.New("--cursor-secret must not be empty")
	case cfg.RateLimit.Rate < 0 || cfg.RateLimit.Burst < 0:
		return errors.New("--actor-rate and --actor-burst must not be negative")
	}
	if cfg.NoPlanner {
		return nil
	}
	if err := cfg.Planner.WithDefaults().Validate(); err != nil {
		return err
	}
	if cfg.Planner.WithDefaults().Horizon > cfg.Rules.Horizon {
		return fmt.Errorf("--schedule-horizon (%s) must not be beyond --horizon (%s): the partitions end there", cfg.Planner.Horizon, cfg.Rules.Horizon)
	}
	return nil
}

// New connects to the database and builds the servers; Serve starts them.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CreateWorkers <= 0 {
		cfg.CreateWorkers = 8
	}
	pool, verifier, err := server.Connect(ctx, cfg.DatabaseURL, int(cfg.DBMaxConns), cfg.Auth)
	if err != nil {
		return nil, err
	}
	reg := obs.Registry()
	rpcm := obs.NewRPCMetrics(reg)
	st := store.NewStore(pool)
	batcher := store.NewBatcher(st, cfg.CreateWorkers, 256)
	pay := payments.New(st, batcher, cfg.Rules, cfg.CursorSecret, log)
	limiter := ratelimit.New(cfg.RateLimit)
	pay.Spend = limiter.Spend

	gs := grpc.NewServer(svc.GRPCServerOptions(
		// Reused workers keep their grown stacks; a goroutine per stream
		// regrows its stack on every call.
		grpc.NumStreamWorkers(uint32(4*runtime.NumCPU())),
		// A span per RPC, parent of the handler's statements.
		tracing.ServerOption(),
		// Invalid UTF-8 in a request is the client's error, not Internal.
		grpc.ForceServerCodecV2(server.UTF8Codec()),
		grpc.ChainUnaryInterceptor(rpcm.UnaryInterceptor(), apierr.ProtoFieldNames(), verifier.UnaryInterceptor(), limiter.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(verifier.StreamInterceptor()),
	)...)
	payschedv1.RegisterPaymentsServiceServer(gs, pay)
	var hooksDB pgdb.DB = pool
	var hooksPool *pgxpool.Pool
	if cfg.WebhooksDatabaseURL != "" {
		if hooksPool, err = svc.Pool(ctx, cfg.WebhooksDatabaseURL, 4, svc.CustomPlans); err != nil {
			pool.Close()
			return nil, fmt.Errorf("webhooks database: %w", err)
		}
		hooksDB = hooksPool
	}
	hooks := payments.NewWebhooks(hooksDB, cfg.LoopbackWebhooks, log)
	hooks.DefaultTenant = cfg.Auth.DefaultTenant
	payschedv1.RegisterWebhooksServiceServer(gs, hooks)
	schedules := payments.NewSchedules(pool, cfg.Rules, cfg.CursorSecret, log)
	payschedv1.RegisterSchedulesServiceServer(gs, schedules)
	var plan *planner.Planner
	if !cfg.NoPlanner {
		if plan, err = planner.New(cfg.Planner.WithDefaults(), pool, reg, log.With("component", "planner")); err != nil {
			pool.Close()
			return nil, err
		}
	}
	ready := server.Pinger(pool)
	h, err := rest.New(ctx, rest.Options{
		Payments: pay, Webhooks: hooks, Schedules: schedules, CreateViolations: pay.Violations, Verifier: verifier, Admit: limiter.Admit, Ready: ready,
		OpenAPI: openapi.JSON, OpenAPIv3: openapi.JSONv3, RPC: rpcm, Log: log,
	})
	if err != nil {
		pool.Close()
		if hooksPool != nil {
			hooksPool.Close()
		}
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	return &Server{
		pool: pool, hooks: hooksPool, batcher: batcher, horizon: cfg.Rules.Horizon, planner: plan, grpc: gs, http: h, ready: ready,
		reg: reg, log: log, reflection: cfg.Reflection,
	}, nil
}

func (s *Server) ensurePartitions(ctx context.Context) {
	now := time.Now()
	if n, err := store.EnsurePartitions(ctx, s.pool, now.AddDate(0, 0, -1), now.Add(s.horizon).AddDate(0, 0, 2)); err != nil {
		s.log.Warn("could not ensure partitions (has the migration run?)", "err", err)
	} else if n > 0 {
		s.log.Info("created partitions", "count", n)
	}
}

// Serve runs until ctx ends, then shuts down gracefully (svc.Server):
// in-flight requests finish, new ones are refused, and the pool is closed.
// l.GRPC and l.HTTP carry the API; l.Internal /metrics and /healthz,
// apart, so what reaches the API (an ingress) sees no internals.
func (s *Server) Serve(ctx context.Context, l server.Listeners) error {
	defer s.close()
	// A create beyond the last partition would fail, so the API keeps
	// partitions through its own horizon, hourly, whether or not a reaper runs.
	return svc.Server{Name: "payments-api", Log: s.log, Registry: s.reg, GRPC: s.grpc, GRPCListener: l.GRPC,
		Reflection: s.reflection, HTTP: s.http, HTTPListener: l.HTTP, InternalListener: l.Internal, Ready: s.ready,
		Grace: 20 * time.Second}.Run(ctx, s.upkeep)
}

// upkeep keeps partitions through the horizon, hourly, and runs the
// planner.
func (s *Server) upkeep(ctx context.Context) error {
	if s.planner != nil {
		go func() {
			// Partitions first: an occurrence due in a day without one
			// would fail its batch.
			s.ensurePartitions(ctx)
			_ = s.planner.Run(ctx)
		}()
	}
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		s.ensurePartitions(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// close releases what New opened, after the servers have stopped.
func (s *Server) close() {
	s.batcher.Close()
	s.pool.Close()
	if s.hooks != nil {
		s.hooks.Close()
	}
}
