// Package apiserver assembles the payments-api process: the Postgres pool,
// the gRPC server (PaymentsService, health, reflection) and the REST
// gateway, and runs them until the context ends.
package apiserver

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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/gen/openapi"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/adminapi"
	"github.com/paysched/paysched/pkg/auth"
	"github.com/paysched/paysched/pkg/migrate"
	"github.com/paysched/paysched/pkg/money"
	"github.com/paysched/paysched/pkg/obs"
	"github.com/paysched/paysched/pkg/paymentsapi"
	"github.com/paysched/paysched/pkg/ratelimit"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/pkg/restapi"
	"github.com/paysched/paysched/pkg/schedule"
	"github.com/paysched/paysched/pkg/svc"
	"github.com/paysched/paysched/pkg/tracing"
)

// Config is payments-api's configuration.
type Config struct {
	DatabaseURL  string
	DBMaxConns   int32
	Auth         auth.Config
	Rules        paymentsapi.Rules
	CursorSecret []byte
	// CreateWorkers write single creates in coalesced statements.
	CreateWorkers int
	// GatewayAddr is the gateway the admin API reconciles against (the
	// admin API answers trigger requests FAILED_PRECONDITION when empty).
	GatewayAddr string
	// RateLimit is the per-actor request rate limit (off when its Rate is 0).
	RateLimit ratelimit.Config
}

// Server is a running payments-api.
type Server struct {
	pool    *pgxpool.Pool
	gwConn  *grpc.ClientConn
	batcher *schedule.Batcher
	horizon time.Duration
	grpc    *grpc.Server
	http    *http.Server
	health  *health.Server
	log     *slog.Logger
}

// New connects to the database and builds the servers; Serve starts them.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if !money.Known(cfg.Rules.DefaultCurrency) {
		return nil, fmt.Errorf("default currency %q is not an ISO 4217 code", cfg.Rules.DefaultCurrency)
	}
	if cfg.Rules.AmountCap <= 0 || cfg.Rules.Horizon <= 0 {
		return nil, errors.New("amount cap and horizon must be positive")
	}
	if cfg.CreateWorkers <= 0 {
		cfg.CreateWorkers = 8
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if cfg.DBMaxConns > 0 {
		pcfg.MaxConns = cfg.DBMaxConns
	}
	// Custom plans only: a generic plan of a statement on payments is
	// pruned at run time, but still locks every daily partition (a year of
	// them) on each execution; with the due time a known constant the
	// planner keeps one partition.
	pcfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	pcfg.ConnConfig.Tracer = tracing.NewDBTracer()
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect database: %w", err)
	}
	verifier, err := auth.NewVerifier(cfg.Auth)
	if err != nil {
		pool.Close()
		return nil, err
	}
	reg := obs.Registry()
	rpcm := obs.NewRPCMetrics(reg)
	store := schedule.NewStore(pool)
	batcher := schedule.NewBatcher(store, cfg.CreateWorkers, 256)
	payments := paymentsapi.New(store, batcher, cfg.Rules, cfg.CursorSecret, log)
	limiter := ratelimit.New(cfg.RateLimit)

	gs := grpc.NewServer(
		// Reused workers keep their grown stacks; a goroutine per stream
		// regrows its stack on every call.
		grpc.NumStreamWorkers(uint32(4*runtime.NumCPU())),
		// A span per RPC, parent of the handler's statements.
		tracing.ServerOption(),
		// Invalid UTF-8 in a request is the client's error, not Internal.
		grpc.ForceServerCodecV2(newUTF8Codec()),
		grpc.ChainUnaryInterceptor(rpcm.UnaryInterceptor(), verifier.UnaryInterceptor(), limiter.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(verifier.StreamInterceptor()),
	)
	payschedv1.RegisterPaymentsServiceServer(gs, payments)
	var runner *reconcile.Runner
	var gwConn *grpc.ClientConn
	if cfg.GatewayAddr != "" {
		// Settlement pages are large: up to 10,000 charges each.
		gwConn, err = grpc.NewClient(cfg.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), svc.FastReconnect(),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("gateway client: %w", err)
		}
		runner = &reconcile.Runner{DB: pool, Gateway: gatewayv1.NewGatewayServiceClient(gwConn), Metrics: reconcile.NewMetrics(reg), Log: log}
	}
	admin := adminapi.New(pool, runner, log)
	payschedv1.RegisterAdminServiceServer(gs, admin)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	ready := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return pool.Ping(ctx)
	}
	h, err := restapi.New(ctx, restapi.Options{
		Payments: payments, Admin: admin, CreateViolations: payments.Violations, Verifier: verifier, Admit: limiter.Admit, Ready: ready,
		OpenAPI: openapi.JSON, Metrics: obs.Handler(reg), RPC: rpcm, Log: log,
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	return &Server{
		pool: pool, gwConn: gwConn, batcher: batcher, horizon: cfg.Rules.Horizon, grpc: gs, health: hs, log: log,
		http: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute},
	}, nil
}

func (s *Server) ensurePartitions(ctx context.Context) {
	now := time.Now()
	if n, err := migrate.EnsurePartitions(ctx, s.pool, now.AddDate(0, 0, -1), now.Add(s.horizon).AddDate(0, 0, 2)); err != nil {
		s.log.Warn("could not ensure partitions (has the migration run?)", "err", err)
	} else if n > 0 {
		s.log.Info("created partitions", "count", n)
	}
}

// Serve runs until ctx ends, then shuts down gracefully: in-flight requests
// finish, new ones are refused, and the pool is closed.
func (s *Server) Serve(ctx context.Context, grpcLis, httpLis net.Listener) error {
	// A create beyond the last partition would fail, so the API keeps
	// partitions through its own horizon, hourly, whether or not a reaper runs.
	s.ensurePartitions(ctx)
	go func() {
		t := time.NewTicker(time.Hour)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.ensurePartitions(ctx)
			}
		}
	}()
	if err := s.pool.Ping(ctx); err != nil {
		s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
		s.log.Warn("database not reachable yet", "err", err)
	}
	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(grpcLis) }()
	go func() {
		if err := s.http.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
			return
		}
		errc <- nil
	}()
	s.log.Info("payments-api serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String())
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.health.Shutdown()
	shutCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = s.http.Shutdown(shutCtx)
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutCtx.Done():
		s.grpc.Stop()
	}
	s.batcher.Close()
	if s.gwConn != nil {
		s.gwConn.Close()
	}
	s.pool.Close()
	s.log.Info("payments-api stopped")
	return err
}
