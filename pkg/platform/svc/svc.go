// Package svc is the process plumbing every paysched service shares: signal
// handling, the database pool, and serving gRPC (with health) and HTTP
// (/metrics, /healthz) until SIGTERM, then stopping gracefully.
package svc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/tracing"
)

// Context ends on SIGINT or SIGTERM.
func Context() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// PoolOption adjusts a pool's configuration.
type PoolOption func(*pgxpool.Config)

// CustomPlans plans every statement for its parameters' values and the
// tables' current sizes (plan_cache_mode=force_custom_plan). payments-api's
// by-id statements name one payment's due time, and the engine's batch
// statements name their partition (pkg/store's partitionSQL), so each plan
// covers one partition: cheap to make, and never a cached plan that locks
// a year of partitions on every execution, or that was made while a
// partition was empty and scans it whole once it holds a spike.
//
// It also prices a random page read as what it is for a schedule whose
// hot partitions live in memory (random_page_cost=1.1, Postgres's default
// of 4 is for spinning disks): at the default, a thousand primary-key
// probes looked dearer than reading a spike's whole partition, and the
// planner chose the sequential scan.
func CustomPlans(cfg *pgxpool.Config) {
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	cfg.ConnConfig.RuntimeParams["random_page_cost"] = "1.1"
}

// Pool connects to Postgres. Its statements are traced (a span each) when
// they run under a traced request or batch.
func Pool(ctx context.Context, url string, maxConns int, opts ...PoolOption) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	cfg.ConnConfig.Tracer = tracing.NewDBTracer()
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		// pg_stat_activity (and an operator's eye) then names the service
		// behind each connection; a URL's application_name wins.
		cfg.ConnConfig.RuntimeParams["application_name"] = filepath.Base(os.Args[0])
	}
	for _, o := range opts {
		o(cfg)
	}
	if maxConns > 0 {
		cfg.MaxConns = int32(maxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect database: %w", err)
	}
	return pool, nil
}

// Server is what a service serves.
type Server struct {
	Name     string
	Log      *slog.Logger
	Registry *prometheus.Registry
	// GRPC, if set, is served on GRPCAddr (or GRPCListener) with
	// grpc.health.v1, every registered service's health following Ready.
	GRPC         *grpc.Server
	GRPCAddr     string
	GRPCListener net.Listener
	// Reflection registers gRPC server reflection (for grpcurl).
	Reflection bool
	// HTTPAddr (or HTTPListener) serves /metrics and /healthz, and Handlers;
	// or HTTP alone when set (it then serves its own health and metrics).
	HTTPAddr     string
	HTTPListener net.Listener
	HTTP         http.Handler
	// Handlers are extra HTTP routes (ServeMux patterns), e.g. a webhook.
	Handlers map[string]http.Handler
	// InternalAddr (or InternalListener), when set, serves /metrics and
	// /healthz apart from HTTPAddr, which then carries no /metrics: a
	// listener the public (an ingress, a gateway's webhooks) reaches
	// shows nothing of the process's internals.
	InternalAddr     string
	InternalListener net.Listener
	// Ready answers /healthz (nil: always ready).
	Ready func(context.Context) error
	// ReadyInterval is how often gRPC health follows Ready (0: ReadyEvery).
	ReadyInterval time.Duration
	// Grace bounds the graceful stop.
	Grace time.Duration
}

// Run serves until ctx ends, running work (the service's loop, may be nil)
// alongside; it returns when both are done.
func (s Server) Run(ctx context.Context, work func(context.Context) error) error {
	if s.Grace == 0 {
		s.Grace = 30 * time.Second
	}
	errc := make(chan error, 3)
	var hs *health.Server
	if s.GRPC != nil {
		hs = health.NewServer()
		healthpb.RegisterHealthServer(s.GRPC, hs)
		if s.Reflection {
			reflection.Register(s.GRPC)
		}
		lis := s.GRPCListener
		if lis == nil {
			var err error
			if lis, err = net.Listen("tcp", s.GRPCAddr); err != nil {
				return fmt.Errorf("listen grpc %s: %w", s.GRPCAddr, err)
			}
		}
		go func() { errc <- s.GRPC.Serve(lis) }()
	}
	internal := s.InternalListener != nil || s.InternalAddr != ""
	h := s.HTTP
	if h == nil {
		mux := s.mux(!internal)
		for pattern, h := range s.Handlers {
			mux.Handle(pattern, h)
		}
		h = mux
	}
	hl := s.HTTPListener
	if hl == nil {
		var err error
		if hl, err = net.Listen("tcp", s.HTTPAddr); err != nil {
			return fmt.Errorf("listen http %s: %w", s.HTTPAddr, err)
		}
	}
	httpSrv := NewHTTPServer(h)
	go func() {
		if err := httpSrv.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	var internalSrv *http.Server
	if internal {
		il := s.InternalListener
		if il == nil {
			var err error
			if il, err = net.Listen("tcp", s.InternalAddr); err != nil {
				_ = httpSrv.Close()
				return fmt.Errorf("listen internal http %s: %w", s.InternalAddr, err)
			}
		}
		internalSrv = NewHTTPServer(s.mux(true))
		go func() {
			if err := internalSrv.Serve(il); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if hs != nil {
		go s.followReady(ctx, hs)
	}
	workDone := make(chan error, 1)
	wctx, cancelWork := context.WithCancel(ctx)
	defer cancelWork()
	if work != nil {
		go func() { workDone <- work(wctx) }()
	}
	s.Log.Info(s.Name+" running", "grpc", addr(s.GRPCListener, s.GRPCAddr), "http", hl.Addr().String())
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	case runErr = <-workDone:
		work = nil
	}
	if hs != nil {
		hs.Shutdown()
	}
	cancelWork()
	if work != nil {
		if err := <-workDone; err != nil && runErr == nil {
			runErr = err
		}
	}
	if s.GRPC != nil {
		stopped := make(chan struct{})
		go func() { s.GRPC.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(s.Grace):
			s.GRPC.Stop()
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = httpSrv.Shutdown(sctx)
	if internalSrv != nil {
		_ = internalSrv.Shutdown(sctx)
	}
	s.Log.Info(s.Name + " stopped")
	return runErr
}

// mux serves /healthz, and /metrics if metrics.
func (s Server) mux(metrics bool) *http.ServeMux {
	mux := http.NewServeMux()
	if metrics {
		mux.Handle("GET /metrics", obs.Handler(s.Registry))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if s.Ready != nil {
			if err := s.Ready(r.Context()); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"status":"unavailable"}`)
				return
			}
		}
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	return mux
}

// NewHTTPServer serves h with the timeouts every paysched listener uses:
// a slow or stalled client cannot hold a connection or a goroutine forever.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
}

// MaxConcurrentStreams bounds the calls one client connection may have
// open on a paysched gRPC server: past it new ones wait, so one client
// cannot take every handler goroutine. The largest real use is an
// executor's Charges and a payments-api client's concurrent creates, far
// below it.
const MaxConcurrentStreams = 1000

// GRPCServerOptions are the options every paysched gRPC server starts
// with, before its own: the stream limit, and a keepalive policy that
// drops a client pinging more often than every 30 s without a call open
// (a ping flood) and closes connections idle for 15 minutes, probing a
// silent one every 2 minutes so dead peers are noticed.
func GRPCServerOptions(opts ...grpc.ServerOption) []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 15 * time.Minute, Time: 2 * time.Minute, Timeout: 20 * time.Second}),
	}, opts...)
}

// ReadyEvery is how often a gRPC server's health follows Ready.
const ReadyEvery = 5 * time.Second

// followReady keeps grpc.health.v1 true to Ready for "" and every service
// registered on the server, until ctx ends.
func (s Server) followReady(ctx context.Context, hs *health.Server) {
	names := []string{""}
	for name := range s.GRPC.GetServiceInfo() {
		names = append(names, name)
	}
	every := s.ReadyInterval
	if every <= 0 {
		every = ReadyEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		status := healthpb.HealthCheckResponse_SERVING
		if s.Ready != nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if err := s.Ready(rctx); err != nil && ctx.Err() == nil {
				status = healthpb.HealthCheckResponse_NOT_SERVING
			}
			cancel()
		}
		if ctx.Err() != nil {
			return
		}
		for _, n := range names {
			hs.SetServingStatus(n, status)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func addr(l net.Listener, fallback string) string {
	if l != nil {
		return l.Addr().String()
	}
	return fallback
}

// Main runs a service: Boot parses fs, then run works until the signal
// context ends. A failure is logged and exits 1 only after run has returned
// (its deferred pool and connection closes done) and traces are flushed.
func Main(name string, fs *flag.FlagSet, run func(ctx context.Context, log *slog.Logger) error) {
	ctx, log, stop := Boot(name, fs)
	err := run(ctx, log)
	stop()
	if err != nil {
		log.Error(name+" failed", "err", err)
		os.Exit(1)
	}
}

// Boot is the start of every service's main: it adds --pprof-addr to fs,
// parses the flags (PAYSCHED_* environment included; a bad value exits 2),
// starts JSON logging, tracing (see Tracing) and, when asked, the profiler,
// and returns a context that SIGINT or SIGTERM ends. The returned stop
// releases the signal handlers and flushes the spans still buffered.
func Boot(name string, fs *flag.FlagSet) (context.Context, *slog.Logger, context.CancelFunc) {
	pprofAddr := fs.String("pprof-addr", "", "serve net/http/pprof here, a loopback address such as 127.0.0.1:6060 (off when empty)")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	log := obs.Logger(name)
	tuneGC()
	if err := obs.ServePprof(*pprofAddr, log); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, stop := Context()
	flush := Tracing(ctx, name, log)
	return ctx, log, func() {
		stop()
		flush()
	}
}

// GCPercent is the services' garbage collection target (GOGC) unless the
// environment sets one. The services' live heaps are small (tens of MB),
// and at Go's default of 100 the collector took a fifth of the engine's
// CPU during a due-time spike; at 400 the spike ran about a fifth faster
// for some tens of MB more per process (docs/PERFORMANCE.md). Under a
// memory limit (GOMEMLIMIT, set from the container's limit in k8s) the
// runtime collects sooner as the heap nears it (MemoryLimit by default).
const GCPercent = 400

// MemoryLimit is the services' soft memory limit (GOMEMLIMIT) unless the
// environment sets one: with GOGC at 400 a burst of work (the audit log
// catching up after a spike) let the heap grow to five times what was
// live, over 500 MB; near this limit the runtime collects sooner instead.
const MemoryLimit = 256 << 20

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(MemoryLimit)
	}
}

// TraceFlushTimeout bounds how long a stopping service waits for its last
// spans to reach the collector.
const TraceFlushTimeout = 5 * time.Second

// Tracing sets up OpenTelemetry for service name (tracing.Setup: spans are
// exported over OTLP only when OTEL_EXPORTER_OTLP_ENDPOINT is set) and
// returns the function that flushes them at shutdown, bounded by
// TraceFlushTimeout. A setup error is logged and leaves tracing off.
func Tracing(ctx context.Context, name string, log *slog.Logger) (flush func()) {
	otel.SetErrorHandler(tracing.ErrorLogger(log, time.Minute))
	shutdown, err := tracing.Setup(ctx, name)
	if err != nil {
		log.Error("tracing off", "err", err)
		return func() {}
	}
	if e := tracing.Endpoint(); e != "" {
		log.Info("exporting traces over OTLP", "endpoint", e)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), TraceFlushTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("could not flush traces", "err", err)
		}
	}
}

// FastReconnect redials a restarted peer within a second (MaxRedial):
// gRPC's default backoff grows to two minutes, far longer than a pod
// restart takes.
func FastReconnect() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{Backoff: redial})
}

// redial is FastReconnect's backoff: its longest wait, jitter included,
// is 960 ms.
var redial = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 800 * time.Millisecond}

// MaxRedial is the longest FastReconnect waits between two dials.
func MaxRedial() time.Duration {
	return time.Duration(float64(redial.MaxDelay) * (1 + redial.Jitter))
}
