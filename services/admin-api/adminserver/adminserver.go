// Package adminserver assembles the admin-api process: the operators'
// AdminService over gRPC and REST, the gateway operators' moves ask first,
// reconciliation runs, and the operator console. It lives apart from
// pkg/api/server (payments-api's) so that the internet-facing binary links
// none of it: no gateway client, console, admin service or reconciler
// (test/layout's TestPaymentsAPILinksNoAdminSide); and beside admin-api's
// main, above the console it imports, so that pkg/api stays plumbing that
// links no console.
package adminserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/paysched/paysched/gen/openapi"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/pkg/api/rest"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/pkg/console"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/pkg/store"
)

// Config is admin-api's configuration.
type Config struct {
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
	// LoopbackWebhooks lets webhook endpoints be http:// on loopback
	// (development: a local receiver).
	LoopbackWebhooks bool
	// WebhooksDatabaseURL is the webhooks' database (empty: the tables
	// are in the schedule's).
	WebhooksDatabaseURL string
	// Approval is the four-eyes policy of every operator's request, from
	// the API and the console alike (zero: approval.Strict).
	Approval approval.Policy
}

// Validate reports the first configuration error.
func (cfg Config) Validate() error {
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

// Server is a running admin-api.
type Server struct {
	pool  *pgxpool.Pool
	gw    dial.Gateway
	grpc  *grpc.Server
	http  http.Handler
	ready func(context.Context) error
	reg   *prometheus.Registry
	log   *slog.Logger
	// reflection: gRPC server reflection is served (development).
	reflection bool
	// console, when served, runs its caches beside.
	console *console.Console
	// requests are the operators' requests; their runner runs beside.
	requests *approval.Requests
	adm      *admin.Server
	audit    *pgxpool.Pool
	hooks    *pgxpool.Pool
}

// New builds admin-api: AdminService over gRPC and REST (/v1/admin/...,
// and its OpenAPI document to admins), its own database role's pool, and
// the gateway operators' moves ask first.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, verifier, err := server.Connect(ctx, cfg.DatabaseURL, int(max(cfg.DBMaxConns, 8)), cfg.Auth)
	if err != nil {
		return nil, err
	}
	reg := obs.Registry()
	rpcm := obs.NewRPCMetrics(reg)
	limiter := ratelimit.New(cfg.RateLimit)
	gs := grpc.NewServer(svc.GRPCServerOptions(
		tracing.ServerOption(),
		grpc.ForceServerCodecV2(server.UTF8Codec()),
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
		// Operators' moves act on the gateway's proofs of absence, which
		// hold only within the contract's clock skew margin (a gateway not
		// up yet is waited for, a minute).
		if err := gateway.CheckClock(ctx, gw, func(ctx context.Context) (time.Time, error) { return store.Now(ctx, pool) }, time.Minute); err != nil {
			gw.Close()
			pool.Close()
			return nil, err
		}
		runner = &reconcile.Runner{DB: pool, Gateway: gw, Metrics: reconcile.NewMetrics(reg), Log: log}
		prober = &gateway.Charger{Gateway: gw, ProbeTimeout: 5 * time.Second, MaxRequest: cfg.Gateway.MaxRequestTime()}
	}
	adm := admin.New(pool, runner, prober, log)
	adm.LoopbackWebhooks = cfg.LoopbackWebhooks
	if cfg.Approval.Window == 0 {
		cfg.Approval = approval.Strict()
	}
	if adm.Requests, err = approval.New(pool, cfg.Approval, log); err != nil {
		pool.Close()
		if gw != nil {
			gw.Close()
		}
		return nil, err
	}
	adm.Process = hostname()
	var hooks *pgxpool.Pool
	if cfg.WebhooksDatabaseURL != "" {
		if hooks, err = svc.Pool(ctx, cfg.WebhooksDatabaseURL, 4, svc.CustomPlans); err != nil {
			pool.Close()
			if gw != nil {
				gw.Close()
			}
			return nil, fmt.Errorf("webhooks database: %w", err)
		}
		adm.HooksDB = hooks
	}
	payschedv1.RegisterAdminServiceServer(gs, adm)
	ready := server.Pinger(pool)
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
	srv := &Server{pool: pool, hooks: hooks, gw: gw, grpc: gs, http: h, ready: ready, reg: reg, log: log, reflection: cfg.Reflection,
		requests: adm.Requests, adm: adm}
	if cfg.Console != nil {
		// The console's actions go through the limiter the API's calls
		// do, per operator.
		cc := *cfg.Console
		cc.Admit = func(op string) (bool, time.Duration) { return limiter.Allow("console:" + op) }
		cfg.Console = &cc
		if err := srv.serveConsole(ctx, cfg, adm); err != nil {
			srv.close()
			return nil, err
		}
	}
	return srv, nil
}

// serveConsole mounts the operator console under /console/ beside the
// REST API.
func (s *Server) serveConsole(ctx context.Context, cfg Config, adm *admin.Server) error {
	ccfg := *cfg.Console
	if cfg.AuditDatabaseURL != "" {
		audit, err := svc.Pool(ctx, cfg.AuditDatabaseURL, 4, svc.CustomPlans)
		if err != nil {
			return fmt.Errorf("audit database: %w", err)
		}
		s.audit, ccfg.AuditDB = audit, audit
	}
	if s.hooks != nil {
		ccfg.HooksDB = s.hooks
	}
	ccfg.Requests = adm.Requests
	c, err := console.New(ctx, ccfg, s.pool, admin.NewConsoleActions(adm), s.log)
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

// Serve runs until ctx ends, then shuts down gracefully (svc.Server), as
// payments-api does: l.GRPC and l.HTTP carry the API (and the console),
// l.Internal /metrics and /healthz.
func (s *Server) Serve(ctx context.Context, l server.Listeners) error {
	defer s.close()
	// The requests' runner applies what was approved (or queued), from
	// the console and the API alike, whether or not the console is
	// served.
	upkeep := func(ctx context.Context) error {
		if s.console != nil {
			go func() { _ = s.console.Run(ctx) }()
		}
		s.requests.Run(ctx, s.adm.Process, admin.RequestActions{S: s.adm})
		return nil
	}
	return svc.Server{Name: "admin-api", Log: s.log, Registry: s.reg, GRPC: s.grpc, GRPCListener: l.GRPC,
		Reflection: s.reflection, HTTP: s.http, HTTPListener: l.HTTP, InternalListener: l.Internal, Ready: s.ready,
		Grace: 20 * time.Second}.Run(ctx, upkeep)
}

// Close releases what New opened, for a server that is not served (Serve
// releases it when it returns).
func (s *Server) Close() { s.close() }

// close releases what New opened, after the servers have stopped.
func (s *Server) close() {
	if s.gw != nil {
		s.gw.Close()
	}
	if s.audit != nil {
		s.audit.Close()
	}
	if s.hooks != nil {
		s.hooks.Close()
	}
	s.pool.Close()
}

// hostname names this replica as a runner of requests.
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "admin-api"
	}
	return "admin-api@" + h
}
