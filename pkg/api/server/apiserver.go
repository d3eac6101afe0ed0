// Package apiserver assembles the payments-api process: the Postgres pool,
// the gRPC server (PaymentsService, health, reflection) and the REST
// gateway, and runs them until the context ends.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/paysched/paysched/gen/openapi"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/pkg/api/rest"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/pkg/reconcile"
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
	// Gateway is the gateway the admin API reconciles against and probes
	// (the admin API answers trigger requests FAILED_PRECONDITION when nil).
	Gateway *dial.Flags
	// RateLimit is the per-actor request rate limit (off when its Rate is 0).
	RateLimit ratelimit.Config
}

// Server is a running payments-api.
type Server struct {
	pool    *pgxpool.Pool
	gw      dial.Gateway
	batcher *store.Batcher
	horizon time.Duration
	grpc    *grpc.Server
	http    http.Handler
	ready   func(context.Context) error
	reg     *prometheus.Registry
	log     *slog.Logger
}

// Validate reports the first configuration error.
func (cfg Config) Validate() error {
	switch {
	case !payment.Known(cfg.Rules.DefaultCurrency):
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
	// Its statements name one payment's due time: custom plans keep one
	// partition (svc.CustomPlans).
	pool, err := svc.Pool(ctx, cfg.DatabaseURL, int(cfg.DBMaxConns), svc.CustomPlans)
	if err != nil {
		return nil, err
	}
	verifier, err := auth.NewVerifier(cfg.Auth)
	if err != nil {
		pool.Close()
		return nil, err
	}
	reg := obs.Registry()
	rpcm := obs.NewRPCMetrics(reg)
	st := store.NewStore(pool)
	batcher := store.NewBatcher(st, cfg.CreateWorkers, 256)
	pay := payments.New(st, batcher, cfg.Rules, cfg.CursorSecret, log)
	limiter := ratelimit.New(cfg.RateLimit)

	gs := grpc.NewServer(svc.GRPCServerOptions(
		// Reused workers keep their grown stacks; a goroutine per stream
		// regrows its stack on every call.
		grpc.NumStreamWorkers(uint32(4*runtime.NumCPU())),
		// A span per RPC, parent of the handler's statements.
		tracing.ServerOption(),
		// Invalid UTF-8 in a request is the client's error, not Internal.
		grpc.ForceServerCodecV2(newUTF8Codec()),
		grpc.ChainUnaryInterceptor(rpcm.UnaryInterceptor(), apierr.ProtoFieldNames(), verifier.UnaryInterceptor(), limiter.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(verifier.StreamInterceptor()),
	)...)
	payschedv1.RegisterPaymentsServiceServer(gs, pay)
	var runner *reconcile.Runner
	var prober admin.Prober
	var gw dial.Gateway
	if cfg.Gateway != nil {
		// Settlement pages are large: up to 10,000 charges each.
		gw, err = cfg.Gateway.Open(ctx, svc.FastReconnect(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			pool.Close()
			return nil, err
		}
		runner = &reconcile.Runner{DB: pool, Gateway: gw, Metrics: reconcile.NewMetrics(reg), Log: log}
		prober = &gateway.Charger{Gateway: gw, ProbeTimeout: 5 * time.Second}
	}
	adm := admin.New(pool, runner, prober, log)
	payschedv1.RegisterAdminServiceServer(gs, adm)
	ready := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return pool.Ping(ctx)
	}
	h, err := rest.New(ctx, rest.Options{
		Payments: pay, Admin: adm, CreateViolations: pay.Violations, Verifier: verifier, Admit: limiter.Admit, Ready: ready,
		OpenAPI: openapi.JSON, OpenAPIv3: openapi.JSONv3, AdminOpenAPI: openapi.AdminJSON, Metrics: obs.Handler(reg), RPC: rpcm, Log: log,
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	return &Server{
		pool: pool, gw: gw, batcher: batcher, horizon: cfg.Rules.Horizon, grpc: gs, http: h, ready: ready,
		reg: reg, log: log,
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
func (s *Server) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	defer s.close()
	// A create beyond the last partition would fail, so the API keeps
	// partitions through its own horizon, hourly, whether or not a reaper runs.
	upkeep := func(ctx context.Context) error {
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
	return svc.Server{Name: "payments-api", Log: s.log, Registry: s.reg, GRPC: s.grpc, GRPCListener: grpcLis,
		Reflection: true, HTTP: s.http, HTTPListener: httpLis, Ready: s.ready, Grace: 20 * time.Second}.Run(ctx, upkeep)
}

// close releases what New opened, after the servers have stopped.
func (s *Server) close() {
	s.batcher.Close()
	if s.gw != nil {
		s.gw.Close()
	}
	s.pool.Close()
}
