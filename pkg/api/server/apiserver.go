// Package server assembles the two API processes: payments-api (the
// payers' PaymentsService over gRPC and REST) and admin-api (the
// operators' AdminService), each with its Postgres pool, gRPC server and
// REST gateway, and runs them until the context ends. They share the
// plumbing and nothing else: payments-api holds no gateway access and no
// admin power, admin-api no payer's.
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
	"github.com/paysched/paysched/pkg/console"
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
	// RateLimit is the per-actor request rate limit (off when its Rate is 0).
	RateLimit ratelimit.Config
	// Reflection serves gRPC server reflection on the API's port: for
	// development (grpcurl), never on a port the internet reaches.
	Reflection bool
}

// AdminConfig is admin-api's configuration.
type AdminConfig struct {
	DatabaseURL string
	DBMaxConns  int32
	// Auth accepts admin tokens only (its AdminAudience; Audience empty).
	Auth auth.Config
	// Gateway is the gateway operators' moves ask first and reconciliation
	// runs read; nil: those answer FAILED_PRECONDITION.
	Gateway *dial.Flags
	// RateLimit is the per-operator request rate limit.
	RateLimit ratelimit.Config
	// Reflection serves gRPC server reflection (development).
	Reflection bool
	// Console, if set, is served under /console/ on the REST listener.
	Console *console.Config
	// AuditDatabaseURL, if set, is the audit log's database: the
	// console shows a payment's history from it.
	AuditDatabaseURL string
}

// Validate reports the first configuration error.
func (cfg AdminConfig) Validate() error {
	if cfg.Console != nil {
		if err := cfg.Console.Validate(); err != nil {
			return err
		}
	}
	switch {
	case cfg.DBMaxConns < 0:
		return fmt.Errorf("--db-max-conns must not be negative, got %d", cfg.DBMaxConns)
	case cfg.RateLimit.Rate < 0 || cfg.RateLimit.Burst < 0:
		return errors.New("--actor-rate and --actor-burst must not be negative")
	case cfg.Auth.Audience != "":
		return errors.New("admin-api accepts admin tokens only: no payments audience")
	}
	return nil
}

// Server is a running payments-api or admin-api.
type Server struct {
	name    string
	pool    *pgxpool.Pool
	gw      dial.Gateway
	batcher *store.Batcher
	horizon time.Duration
	grpc    *grpc.Server
	http    http.Handler
	ready   func(context.Context) error
	reg     *prometheus.Registry
	log     *slog.Logger
	// reflection: gRPC server reflection is served (development).
	reflection bool
	// console, when served, runs its caches and bulk requests beside.
	console *console.Console
	audit   *pgxpool.Pool
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
	pool, verifier, err := connect(ctx, cfg.DatabaseURL, int(cfg.DBMaxConns), cfg.Auth)
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
		grpc.ForceServerCodecV2(newUTF8Codec()),
		grpc.ChainUnaryInterceptor(rpcm.UnaryInterceptor(), apierr.ProtoFieldNames(), verifier.UnaryInterceptor(), limiter.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(verifier.StreamInterceptor()),
	)...)
	payschedv1.RegisterPaymentsServiceServer(gs, pay)
	ready := pinger(pool)
	h, err := rest.New(ctx, rest.Options{
		Payments: pay, CreateViolations: pay.Violations, Verifier: verifier, Admit: limiter.Admit, Ready: ready,
		OpenAPI: openapi.JSON, OpenAPIv3: openapi.JSONv3, RPC: rpcm, Log: log,
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	return &Server{
		name: "payments-api", pool: pool, batcher: batcher, horizon: cfg.Rules.Horizon, grpc: gs, http: h, ready: ready,
		reg: reg, log: log, reflection: cfg.Reflection,
	}, nil
}

// connect opens an API's pool and token verifier. Its statements name one
// payment's due time: custom plans keep one partition (svc.CustomPlans).
func connect(ctx context.Context, url string, conns int, a auth.Config) (*pgxpool.Pool, *auth.Verifier, error) {
	pool, err := svc.Pool(ctx, url, conns, svc.CustomPlans)
	if err != nil {
		return nil, nil, err
	}
	verifier, err := auth.NewVerifier(a)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, verifier, nil
}

// Listeners are an API's: gRPC and REST, which clients reach, and the
// internal one with /metrics and /healthz.
type Listeners struct {
	GRPC, HTTP, Internal net.Listener
}

// Listen opens the three listeners, or none.
func Listen(grpcAddr, httpAddr, internalAddr string) (Listeners, error) {
	var l Listeners
	var opened []net.Listener
	for _, a := range []struct {
		name, addr string
		into       *net.Listener
	}{{"grpc", grpcAddr, &l.GRPC}, {"http", httpAddr, &l.HTTP}, {"metrics", internalAddr, &l.Internal}} {
		lis, err := net.Listen("tcp", a.addr)
		if err != nil {
			for _, o := range opened {
				o.Close()
			}
			return Listeners{}, fmt.Errorf("listen %s %s: %w", a.name, a.addr, err)
		}
		*a.into = lis
		opened = append(opened, lis)
	}
	return l, nil
}

// Close closes the listeners (for a server that never served them).
func (l Listeners) Close() {
	for _, lis := range []net.Listener{l.GRPC, l.HTTP, l.Internal} {
		if lis != nil {
			lis.Close()
		}
	}
}

// pinger is a readiness check: the database answers.
func pinger(pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return pool.Ping(ctx)
	}
}

// NewAdmin builds admin-api: AdminService over gRPC and REST
// (/v1/admin/..., and its OpenAPI document to admins), its own database
// role's pool, and the gateway operators' moves ask first.
func NewAdmin(ctx context.Context, cfg AdminConfig, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, verifier, err := connect(ctx, cfg.DatabaseURL, int(max(cfg.DBMaxConns, 8)), cfg.Auth)
	if err != nil {
		return nil, err
	}
	reg := obs.Registry()
	rpcm := obs.NewRPCMetrics(reg)
	limiter := ratelimit.New(cfg.RateLimit)
	gs := grpc.NewServer(svc.GRPCServerOptions(
		tracing.ServerOption(),
		grpc.ForceServerCodecV2(newUTF8Codec()),
		grpc.ChainUnaryInterceptor(rpcm.UnaryInterceptor(), apierr.ProtoFieldNames(), verifier.UnaryInterceptor(), limiter.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(verifier.StreamInterceptor()),
	)...)
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
	ready := pinger(pool)
	h, err := rest.New(ctx, rest.Options{
		Admin: adm, Verifier: verifier, Admit: limiter.Admit, Ready: ready,
		AdminOpenAPI: openapi.AdminJSON, RPC: rpcm, Log: log,
	})
	if err != nil {
		pool.Close()
		if gw != nil {
			gw.Close()
		}
		return nil, fmt.Errorf("rest gateway: %w", err)
	}
	srv := &Server{name: "admin-api", pool: pool, gw: gw, grpc: gs, http: h, ready: ready, reg: reg, log: log,
		reflection: cfg.Reflection}
	if cfg.Console != nil {
		if err := srv.serveConsole(ctx, cfg, adm); err != nil {
			srv.close()
			return nil, err
		}
	}
	return srv, nil
}

// serveConsole mounts the operator console under /console/ beside the
// REST API.
func (s *Server) serveConsole(ctx context.Context, cfg AdminConfig, adm *admin.Server) error {
	ccfg := *cfg.Console
	if cfg.AuditDatabaseURL != "" {
		audit, err := svc.Pool(ctx, cfg.AuditDatabaseURL, 4, svc.CustomPlans)
		if err != nil {
			return fmt.Errorf("audit database: %w", err)
		}
		s.audit, ccfg.AuditDB = audit, audit
	}
	c, err := console.New(ctx, ccfg, s.pool, admin.ConsoleActions{S: adm}, s.log)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix+"/", c)
	mux.Handle(console.Prefix, c)
	mux.Handle("/", s.http)
	s.console, s.http = c, mux
	return nil
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
func (s *Server) Serve(ctx context.Context, l Listeners) error {
	defer s.close()
	// A create beyond the last partition would fail, so the API keeps
	// partitions through its own horizon, hourly, whether or not a reaper runs.
	var upkeep func(ctx context.Context) error
	if s.batcher != nil {
		upkeep = s.upkeep
	}
	if s.console != nil {
		upkeep = s.console.Run
	}
	return svc.Server{Name: s.name, Log: s.log, Registry: s.reg, GRPC: s.grpc, GRPCListener: l.GRPC,
		Reflection: s.reflection, HTTP: s.http, HTTPListener: l.HTTP, InternalListener: l.Internal, Ready: s.ready,
		Grace: 20 * time.Second}.Run(ctx, upkeep)
}

// upkeep keeps partitions through the horizon, hourly.
func (s *Server) upkeep(ctx context.Context) error {
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
	if s.batcher != nil {
		s.batcher.Close()
	}
	if s.gw != nil {
		s.gw.Close()
	}
	if s.audit != nil {
		s.audit.Close()
	}
	s.pool.Close()
}
