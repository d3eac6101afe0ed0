// Package sweeper claims due payments and hands them to executors: it
// claims only as much as the executors can take (one slot per batch in
// flight), paces claims to the gateway's rate ceiling with a cluster-wide
// token bucket, stops claiming while the gateway fails (circuit breaker),
// and releases at once any claim it could not dispatch.
package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/pkg/store"
)

// Config tunes a sweeper.
type Config struct {
	ID       string        // lease owner
	Interval time.Duration // idle poll interval (1s)
	Batch    int           // rows per claim (500)
	Lease    time.Duration // lease per claim (2m)
	// Executors are host:port addresses; a name that resolves to several
	// addresses (a headless Service) yields one executor per address.
	Executors []string
	// Resolve is how often names are resolved again, so executors that a
	// rollout or an autoscaler adds are used and removed ones dropped
	// (default 15s).
	Resolve time.Duration
	// Lookup resolves a host name (default net.LookupHost; tests stub it).
	Lookup func(host string) ([]string, error)
	// Slots is how many batches each executor may have in flight.
	Slots   int
	Bucket  pacing.Bucket
	Breaker *Breaker
	// Grace bounds how long shutdown waits for batches in flight.
	Grace time.Duration
}

// Validate reports the first configuration error.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return errors.New("--id must not be empty")
	case c.Interval <= 0:
		return fmt.Errorf("--interval must be positive, got %s", c.Interval)
	case c.Batch < 1:
		return fmt.Errorf("--batch must be at least 1, got %d", c.Batch)
	case c.Lease <= 0:
		return fmt.Errorf("--lease must be positive, got %s", c.Lease)
	case len(c.Executors) == 0 || c.Executors[0] == "":
		return errors.New("--executors: at least one executor address is required")
	case c.Slots < 1:
		return fmt.Errorf("--slots must be at least 1, got %d", c.Slots)
	case c.Bucket.Rate < 0:
		return fmt.Errorf("--rate-ceiling must not be negative, got %g", c.Bucket.Rate)
	case c.Breaker != nil && (c.Breaker.Threshold <= 0 || c.Breaker.Threshold > 1):
		return fmt.Errorf("--breaker-threshold must be in (0, 1], got %g", c.Breaker.Threshold)
	case c.Breaker != nil && c.Breaker.Cooldown <= 0:
		return fmt.Errorf("--breaker-cooldown must be positive, got %s", c.Breaker.Cooldown)
	}
	return nil
}

type executor struct {
	addr   string
	client internalv1.ExecutorServiceClient
	cc     *grpc.ClientConn
	// gone: no longer resolved. Its slots are dropped as they come back,
	// and the last one closes the connection (batches in flight finish).
	gone  atomic.Bool
	slots atomic.Int32
}

// Sweeper is one sweeper process's loop.
type Sweeper struct {
	cfg   Config
	db    *pgxpool.Pool
	log   *slog.Logger
	slots chan *executor
	mu    sync.Mutex
	execs map[string]*executor
	wg    sync.WaitGroup
	m     metrics
	trace trace.Tracer
}

type metrics struct {
	claimed, released, dispatchErrors prometheus.Counter
	lateness                          prometheus.Histogram
	breakerOpen                       prometheus.Gauge
}

// maxExecutors bounds the executors one sweeper dispatches to (the slot
// channel's capacity).
const maxExecutors = 512

// New resolves the executors and builds the sweeper.
func New(cfg Config, db *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) (*Sweeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sweeper config: %w", err)
	}
	if cfg.Lookup == nil {
		cfg.Lookup = net.LookupHost
	}
	if cfg.Resolve <= 0 {
		cfg.Resolve = 15 * time.Second
	}
	addrs, err := resolve(cfg.Executors, cfg.Lookup)
	if err != nil {
		return nil, err
	}
	s := &Sweeper{cfg: cfg, db: db, log: log, slots: make(chan *executor, maxExecutors*max(cfg.Slots, 1)),
		execs: map[string]*executor{}, trace: otel.Tracer(tracing.ScopeName + "/sweeper")}
	for _, a := range addrs {
		if err := s.add(a); err != nil {
			return nil, err
		}
	}
	s.m.claimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_claims_total", Help: "Payments claimed."})
	s.m.released = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_claims_released_total", Help: "Claims released undispatched."})
	s.m.dispatchErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_dispatch_errors_total", Help: "Batches an executor did not take or finish."})
	s.m.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paysched_trigger_lateness_seconds",
		Help: "Due time to first store.", Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120, 300}})
	s.m.breakerOpen = prometheus.NewGauge(prometheus.GaugeOpts{Name: "paysched_breaker_open", Help: "1 while the circuit breaker stops claims."})
	reg.MustRegister(s.m.claimed, s.m.released, s.m.dispatchErrors, s.m.lateness, s.m.breakerOpen)
	return s, nil
}

// add dials a newly resolved executor and gives it its slots.
func (s *Sweeper) add(a string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.execs[a]; ok || len(s.execs) >= maxExecutors {
		return nil
	}
	cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()),
		tracing.DialOption(), svc.FastReconnect())
	if err != nil {
		return fmt.Errorf("executor %s: %w", a, err)
	}
	e := &executor{addr: a, client: internalv1.NewExecutorServiceClient(cc), cc: cc}
	e.slots.Store(int32(s.cfg.Slots))
	s.execs[a] = e
	for range s.cfg.Slots {
		s.slots <- e
	}
	return nil
}

// refresh resolves the executors again: new addresses are added, missing
// ones marked gone. A failed or empty lookup keeps what there is (a DNS
// hiccup must not stop the sweep).
func (s *Sweeper) refresh() {
	addrs, err := resolve(s.cfg.Executors, s.cfg.Lookup)
	if err != nil {
		s.log.Warn("re-resolve executors; keeping the current set", "err", err)
		return
	}
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
		if err := s.add(a); err != nil {
			s.log.Warn("add executor", "addr", a, "err", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, e := range s.execs {
		if !want[a] {
			e.gone.Store(true)
			delete(s.execs, a)
			s.log.Info("executor gone from DNS; draining it", "addr", a)
		}
	}
}

// take waits for a free slot of a current executor.
func (s *Sweeper) take(ctx context.Context) (*executor, bool) {
	for {
		select {
		case e := <-s.slots:
			if !e.gone.Load() {
				return e, true
			}
			if e.slots.Add(-1) == 0 {
				_ = e.cc.Close()
			}
		case <-ctx.Done():
			return nil, false
		}
	}
}

// resolve expands names to addresses (a headless Service lists every pod).
func resolve(targets []string, lookup func(string) ([]string, error)) ([]string, error) {
	var out []string
	for _, t := range targets {
		host, port, err := net.SplitHostPort(t)
		if err != nil {
			return nil, fmt.Errorf("executor address %q: %w", t, err)
		}
		if net.ParseIP(host) != nil {
			out = append(out, t)
			continue
		}
		ips, err := lookup(host)
		if err != nil {
			return nil, fmt.Errorf("resolve executor %q: %w", host, err)
		}
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip, port))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no executors configured")
	}
	return out, nil
}

// Run claims and dispatches until ctx ends, then waits for batches in
// flight (up to Grace) and releases every unstarted claim it holds.
func (s *Sweeper) Run(ctx context.Context) error {
	defer s.shutdown()
	go func() {
		t := time.NewTicker(s.cfg.Resolve)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.refresh()
			}
		}
	}()
	for {
		e, ok := s.take(ctx)
		if !ok {
			return nil
		}
		wait := s.step(ctx, e)
		if wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// step claims one batch for executor e (whose slot it holds) and returns
// how long to pause before the next step.
func (s *Sweeper) step(ctx context.Context, e *executor) time.Duration {
	now := time.Now()
	n, probe := s.cfg.Breaker.Allow(s.cfg.Batch, now)
	s.m.breakerOpen.Set(b2f(s.cfg.Breaker.Open()))
	if n == 0 {
		s.slots <- e
		return min(s.cfg.Interval, max(10*time.Millisecond, time.Until(s.cfg.Breaker.Until())))
	}
	granted, err := s.cfg.Bucket.Take(ctx, s.db, n)
	if err != nil || granted == 0 {
		s.slots <- e
		s.cfg.Breaker.Abort(probe)
		if err != nil && ctx.Err() == nil {
			s.log.Error("rate bucket", "err", err)
			return s.cfg.Interval
		}
		return 20 * time.Millisecond
	}
	claimed, err := store.Claim(ctx, s.db, s.cfg.ID, s.cfg.Lease, granted)
	if err != nil {
		s.slots <- e
		s.cfg.Breaker.Abort(probe)
		_ = s.cfg.Bucket.Refund(context.WithoutCancel(ctx), s.db, granted)
		if ctx.Err() == nil {
			s.log.Error("claim", "err", err)
		}
		return s.cfg.Interval
	}
	if len(claimed) < granted {
		_ = s.cfg.Bucket.Refund(ctx, s.db, granted-len(claimed))
	}
	if len(claimed) == 0 {
		s.slots <- e
		s.cfg.Breaker.Abort(probe)
		return s.cfg.Interval
	}
	s.m.claimed.Add(float64(len(claimed)))
	for _, c := range claimed {
		if c.Attempt == 1 {
			s.m.lateness.Observe(now.Sub(c.DueTime).Seconds())
		}
	}
	s.wg.Add(1)
	go s.dispatch(s.batchSpan(now, e, claimed), e, claimed, probe)
	if len(claimed) < granted {
		return s.cfg.Interval // drained: poll again later
	}
	return 0
}

// batchSpan starts the span of one claimed batch ("sweeper.dispatch", from
// the start of the step that claimed it): the parent of the Execute RPC and
// so of the executor's work. It returns a context that carries the span
// and nothing of the loop's cancellation: a dispatched batch runs to its end.
func (s *Sweeper) batchSpan(start time.Time, e *executor, claimed []store.Claimed) context.Context {
	ctx, span := s.trace.Start(context.Background(), "sweeper.dispatch",
		trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("paysched.sweeper.id", s.cfg.ID),
			attribute.String("paysched.executor", e.addr), attribute.Int("paysched.batch.size", len(claimed)))
	}
	return ctx
}

func (s *Sweeper) dispatch(ctx context.Context, e *executor, claimed []store.Claimed, probe bool) {
	defer s.wg.Done()
	defer func() { s.slots <- e }()
	span := trace.SpanFromContext(ctx)
	defer span.End()
	req := &internalv1.ExecuteRequest{SweeperId: s.cfg.ID, Items: make([]*internalv1.WorkItem, len(claimed))}
	for i, c := range claimed {
		req.Items[i] = &internalv1.WorkItem{PaymentId: c.ID.String(), DueTime: timestamppb.New(c.DueTime),
			Attempt: c.Attempt, Retries: c.Retries, Payer: c.Payer, Payee: c.Payee, Amount: c.Amount, Currency: c.Currency}
	}
	// The batch must finish within the lease, or the reaper takes it back.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Lease)
	defer cancel()
	resp, err := e.client.Execute(ctx, req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, "dispatch failed")
		s.m.dispatchErrors.Inc()
		s.cfg.Breaker.Abort(probe)
		n, rerr := store.Release(context.WithoutCancel(ctx), s.db, s.cfg.ID, claimed)
		s.m.released.Add(float64(n))
		s.log.Warn("dispatch failed; released unstarted claims", "executor", e.addr, "err", err,
			"claimed", len(claimed), "released", n, "release_err", rerr)
		span.End() // the rest below is not the batch's
		// Rest this slot a moment rather than claim again for an executor
		// that just failed.
		time.Sleep(s.cfg.Interval)
		return
	}
	good := int(resp.GetSucceeded() + resp.GetDeclined())
	bad := int(resp.GetRetryable() + resp.GetAmbiguous())
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("paysched.batch.succeeded", int(resp.GetSucceeded())),
			attribute.Int("paysched.batch.declined", int(resp.GetDeclined())),
			attribute.Int("paysched.batch.retryable", int(resp.GetRetryable())),
			attribute.Int("paysched.batch.ambiguous", int(resp.GetAmbiguous())),
			attribute.Int("paysched.batch.fenced", int(resp.GetFenced())))
	}
	s.cfg.Breaker.Record(good, bad, probe, time.Now())
}

func (s *Sweeper) shutdown() {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.Grace):
		s.log.Warn("batches still in flight at shutdown; their leases will expire")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := store.ReleaseOwner(ctx, s.db, s.cfg.ID)
	s.log.Info("sweeper stopped", "released", n, "err", err)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.execs {
		_ = e.cc.Close()
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
