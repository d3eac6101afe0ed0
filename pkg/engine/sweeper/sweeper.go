// Package sweeper claims due payments and hands them to executors: it
// claims only as much as the executors can take (credits: each executor
// may hold Slots×Batch payments, and each outcome streamed back frees its
// credit at once, so a slow charge holds only itself), paces claims to the
// gateway's rate ceiling with a cluster-wide token bucket, and stops
// claiming while the gateway fails (circuit breaker). It releases a claim
// only when an executor refused it untouched; after any other dispatch
// error the request may have reached the executor, so the claim is left
// to its lease and the next attempt asks the gateway first.
package sweeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/engine/fair"
	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/pkg/platform/periodic"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/pkg/store"
)

// Config tunes a sweeper.
type Config struct {
	ID       string        // lease owner
	Interval time.Duration // idle poll interval (1s)
	// Cooldown is the pause after a claim that found fewer due rows than
	// it asked for (--claim-cooldown, 100ms): at a steady rate the next
	// claim then takes what fell due meanwhile in one statement, instead
	// of a round every few ms for a few rows each. After a claim that
	// found nothing, the sweeper wakes when the next payment falls due
	// (floor 10ms), not after the cooldown: a quiet schedule's first due
	// rows are claimed on time.
	Cooldown time.Duration
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
	// Slots is how many batches' worth of payments (Slots×Batch) each
	// executor may hold at once.
	Slots  int
	Bucket pacing.Bucket
	// Breaker stops claims while the gateway fails; nil: none (it never
	// opens).
	Breaker *Breaker
	// Grace bounds how long shutdown waits for batches in flight.
	Grace time.Duration
	// Transport is how executors are dialed (mutual TLS: pkg/platform/mtls);
	// nil: plaintext.
	Transport grpc.DialOption
	// Fair shares claims among tenants (pkg/engine/fair).
	Fair fair.Config
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
	case c.Cooldown < 0 || c.Cooldown > c.Interval:
		return fmt.Errorf("--claim-cooldown must be between 0 and --interval (%s), got %s", c.Interval, c.Cooldown)
	case len(c.Executors) == 0 || c.Executors[0] == "":
		return errors.New("--executors: at least one executor address is required")
	case c.Slots < 1:
		return fmt.Errorf("--slots must be at least 1, got %d", c.Slots)
	case c.Fair.Validate() != nil:
		return c.Fair.Validate()
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
	// gone: no longer resolved. It gets no new work, and the last of its
	// dispatches in flight closes the connection.
	gone atomic.Bool
	// free is how many more payments it may be given (its credits).
	free atomic.Int64
	// streams counts its dispatches in flight.
	streams atomic.Int32
	// admitted: its minimum lease (MinLeaseHeader) is known and this
	// sweeper's --lease holds it. Until then it gets no work.
	admitted atomic.Bool
	// asking: a hello to it is in flight.
	asking atomic.Bool
	// ready: its connection is up (watch). A claim is made only for a
	// ready executor: one for an executor that is down would sit out its
	// lease, since a failed dispatch may have reached it.
	ready atomic.Bool
}

// Sweeper is one sweeper process's loop.
type Sweeper struct {
	cfg   Config
	db    *pgxpool.Pool
	log   *slog.Logger
	wake  chan struct{} // a credit came back
	mu    sync.Mutex
	execs map[string]*executor
	wg    sync.WaitGroup
	m     metrics
	trace trace.Tracer
	claim *store.Claimer
	fair  *fair.Scheduler
	// life ends at shutdown: it stops the connection watchers and hellos.
	life context.Context
	stop context.CancelFunc
}

type metrics struct {
	claimed, released, dispatchErrors prometheus.Counter
	lateness                          prometheus.Histogram
	breakerOpen                       prometheus.Gauge
	refused                           prometheus.Gauge
}

// maxExecutors bounds the executors one sweeper dispatches to.
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
	if cfg.Breaker == nil {
		cfg.Breaker = &Breaker{Threshold: 1, MinSamples: math.MaxInt}
	}
	addrs, err := resolve(cfg.Executors, cfg.Lookup)
	if err != nil {
		return nil, err
	}
	s := &Sweeper{cfg: cfg, db: db, log: log, wake: make(chan struct{}, 1),
		execs: map[string]*executor{}, trace: otel.Tracer(tracing.ScopeName + "/sweeper"),
		claim: &store.Claimer{DB: db, Owner: cfg.ID, Lease: cfg.Lease}}
	s.life, s.stop = context.WithCancel(context.Background())
	if s.fair, err = fair.New(cfg.Fair, db); err != nil {
		return nil, fmt.Errorf("sweeper config: %w", err)
	}
	reg.MustRegister(s.fair)
	for _, a := range addrs {
		if err := s.add(a); err != nil {
			return nil, err
		}
	}
	s.m.claimed = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_claims_total", Help: "Payments claimed."})
	s.m.released = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_claims_released_total", Help: "Claims released: an executor refused them untouched."})
	s.m.dispatchErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_dispatch_errors_total", Help: "Batches an executor did not take or finish (claims left to their lease)."})
	s.m.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paysched_trigger_lateness_seconds",
		Help: "Due time to first store.", Buckets: []float64{.1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120, 300}})
	s.m.breakerOpen = prometheus.NewGauge(prometheus.GaugeOpts{Name: "paysched_breaker_open", Help: "1 while the circuit breaker stops claims."})
	s.m.refused = prometheus.NewGauge(prometheus.GaugeOpts{Name: "paysched_sweeper_executors_refused",
		Help: "Executors that get no work from this sweeper: their minimum lease is longer than its --lease (or they have not answered yet)."})
	reg.MustRegister(s.m.claimed, s.m.released, s.m.dispatchErrors, s.m.lateness, s.m.breakerOpen, s.m.refused)
	s.countRefused()
	s.mu.Lock()
	for _, e := range s.execs {
		go s.watch(e)
	}
	s.mu.Unlock()
	return s, nil
}

// watch follows e's connection until it is closed or the sweeper stops:
// each time it comes up (first start, or a restart of the executor) e is
// asked again for its minimum lease and the loop is woken, so an executor
// that starts after the sweeper gets work as soon as it listens (the
// redial backoff is capped below a second: svc.FastReconnect), not at the
// next --resolve-every. While it is down it gets no claims.
func (s *Sweeper) watch(e *executor) {
	e.cc.Connect()
	for state := e.cc.GetState(); ; state = e.cc.GetState() {
		switch state {
		case connectivity.Ready:
			if !e.ready.Swap(true) {
				go s.hello(e)
			}
		case connectivity.Idle:
			// Idle after --idle-timeout with no calls: dial again, so
			// the next claim finds it up.
			e.ready.Store(false)
			e.cc.Connect()
		case connectivity.Shutdown:
			e.ready.Store(false)
			return
		default: // Connecting, TransientFailure
			e.ready.Store(false)
		}
		if !e.cc.WaitForStateChange(s.life, state) {
			return
		}
	}
}

// hello asks e, with an empty Execute, for the shortest lease it can work
// under (executor.MinLeaseHeader), and admits it only if --lease holds
// it: a shorter lease would have every claim released untouched, again
// and again, with nothing charged. Unanswered, it asks again with a
// backoff capped at helloMaxBackoff while the connection is up; when the
// connection comes up again, watch asks anew.
func (s *Sweeper) hello(e *executor) {
	if !e.asking.CompareAndSwap(false, true) {
		return
	}
	defer e.asking.Store(false)
	wait := 50 * time.Millisecond
	for {
		md, err := s.askLease(e)
		if err == nil {
			s.admit(e, md, true)
			return
		}
		s.countRefused()
		if !e.ready.Load() || e.gone.Load() || s.life.Err() != nil {
			// Down again: watch asks once it is back.
			return
		}
		s.log.Warn("executor did not answer; asking again", "executor", e.addr, "err", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-s.life.Done():
			return
		}
		wait = min(2*wait, helloMaxBackoff)
	}
}

// helloMaxBackoff caps the wait between two hellos to an executor whose
// connection is up but which did not answer.
const helloMaxBackoff = time.Second

// askLease sends e an empty Execute and returns its header.
func (s *Sweeper) askLease(e *executor) (metadata.MD, error) {
	ctx, cancel := context.WithTimeout(s.life, 10*time.Second)
	defer cancel()
	stream, err := e.client.Execute(ctx, &internalv1.ExecuteRequest{SweeperId: s.cfg.ID})
	if err != nil {
		return nil, err
	}
	return stream.Header()
}

// admit reads an executor's minimum lease from its header and admits it,
// or refuses it with the reason (logged when loud, or when it was
// admitted until now).
func (s *Sweeper) admit(e *executor, md metadata.MD, loud bool) {
	ok := true
	var need time.Duration
	if v := md.Get(MinLeaseHeader); len(v) > 0 {
		// An executor that does not say (an older version) is admitted.
		ms, err := strconv.ParseInt(v[0], 10, 64)
		need = time.Duration(ms) * time.Millisecond
		ok = err != nil || need <= s.cfg.Lease
	}
	was := e.admitted.Swap(ok)
	if !ok && (loud || was) {
		s.log.Error(fmt.Sprintf("--lease %s is shorter than executor %s needs (%s: its charge and probe timeouts and its lease margin): it gets no work from this sweeper until --lease is at least that",
			s.cfg.Lease, e.addr, need), "executor", e.addr, "lease", s.cfg.Lease, "min_lease", need)
	}
	s.countRefused()
	if ok && !was {
		s.signal()
	}
}

func (s *Sweeper) countRefused() {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.execs {
		if !e.admitted.Load() {
			n++
		}
	}
	s.m.refused.Set(float64(n))
}

// MinLeaseHeader is executor.MinLeaseHeader (the sweeper does not import
// the executor's package).
const MinLeaseHeader = "paysched-min-lease-ms"

// add dials a newly resolved executor and gives it its slots.
func (s *Sweeper) add(a string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.execs[a]; ok || len(s.execs) >= maxExecutors {
		return nil
	}
	transport := s.cfg.Transport
	if transport == nil {
		transport = grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	cc, err := grpc.NewClient(a, transport, tracing.DialOption(), svc.FastReconnect())
	if err != nil {
		return fmt.Errorf("executor %s: %w", a, err)
	}
	e := &executor{addr: a, client: internalv1.NewExecutorServiceClient(cc), cc: cc}
	e.free.Store(s.capacity())
	s.execs[a] = e
	if s.m.refused != nil {
		go s.watch(e)
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
		if want[a] && e.ready.Load() && !e.admitted.Load() {
			go s.hello(e)
		}
		if !want[a] {
			e.gone.Store(true)
			delete(s.execs, a)
			if e.streams.Load() == 0 {
				_ = e.cc.Close()
			}
			s.log.Info("executor gone from DNS; draining it", "addr", a)
		}
	}
}

// capacity is how many payments one executor may hold from this sweeper.
func (s *Sweeper) capacity() int64 { return int64(max(1, s.cfg.Slots) * max(1, s.cfg.Batch)) }

// signal wakes the loop: credits came back or an executor was added.
func (s *Sweeper) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pick returns the current executor with the most credits, if it has
// enough for a worthwhile claim (a quarter batch, or all it may hold).
func (s *Sweeper) pick() *executor {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *executor
	for _, e := range s.execs {
		if !e.gone.Load() && e.ready.Load() && e.admitted.Load() && (best == nil || e.free.Load() > best.free.Load()) {
			best = e
		}
	}
	if best == nil {
		return nil
	}
	if f := best.free.Load(); f >= min(s.capacity(), int64(max(1, s.cfg.Batch/4))) {
		return best
	}
	return nil
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
// flight (up to Grace).
func (s *Sweeper) Run(ctx context.Context) error {
	defer s.shutdown()
	go s.report(ctx, 5*time.Second)
	go periodic.Run(ctx, s.cfg.Resolve, func(context.Context) { s.refresh() })
	for {
		e := s.pick()
		if e == nil {
			select {
			case <-s.wake:
			case <-time.After(s.cfg.Interval):
			case <-ctx.Done():
				return nil
			}
			continue
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

// step claims one batch for executor e (as much as its credits allow) and
// returns how long to pause before the next step.
func (s *Sweeper) step(ctx context.Context, e *executor) time.Duration {
	now := time.Now()
	n, probe := s.cfg.Breaker.Allow(int(min(int64(s.cfg.Batch), e.free.Load())), now)
	s.m.breakerOpen.Set(boolGauge(s.cfg.Breaker.Open()))
	if n == 0 {
		return min(s.cfg.Interval, max(10*time.Millisecond, time.Until(s.cfg.Breaker.Until())))
	}
	granted, err := s.cfg.Bucket.Take(ctx, s.db, n)
	if err != nil || granted == 0 {
		s.cfg.Breaker.Abort(probe)
		if err != nil && ctx.Err() == nil {
			s.log.Error("rate bucket", "err", err)
			return s.cfg.Interval
		}
		return 20 * time.Millisecond
	}
	// Shutdown does not cut a claim short: a statement cancelled by the
	// client may still commit on the server, leaving rows claimed that
	// nobody dispatches until their lease ends. A claim once started
	// finishes and its batch goes out; shutdown waits for the batch.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease)
	claimed, err := s.fair.Claim(cctx, s.claim, granted)
	ccancel()
	if err != nil && len(claimed) > 0 {
		// A later partition failed; these are claimed and must go out.
		s.log.Error("claim", "err", err, "claimed", len(claimed))
		err = nil
	}
	if err != nil {
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
		s.cfg.Breaker.Abort(probe)
		return s.pause(0, granted, time.Now())
	}
	s.m.claimed.Add(float64(len(claimed)))
	for _, c := range claimed {
		if c.Attempt == 1 {
			s.m.lateness.Observe(now.Sub(c.DueTime).Seconds())
		}
	}
	e.free.Add(-int64(len(claimed)))
	e.streams.Add(1)
	s.wg.Add(1)
	go s.dispatch(s.batchSpan(now, e, claimed), e, claimed, probe)
	return s.pause(len(claimed), granted, time.Now())
}

// idleFloor is the shortest wait after a claim that found nothing.
const idleFloor = 10 * time.Millisecond

// pause is how long to wait after a claim that asked for granted rows and
// got claimed: none while there is more (a full claim), the cooldown once
// the due rows ran out (a partial claim: what falls due meanwhile waits at
// most the cooldown), and, after an empty claim, until the next payment
// falls due (idle).
func (s *Sweeper) pause(claimed, granted int, now time.Time) time.Duration {
	switch {
	case claimed >= granted, claimed > 0 && s.fair.CutShort():
		return 0
	case claimed > 0:
		return s.cfg.Cooldown
	}
	return s.idle(now)
}

// idle is how long to wait before claiming again when nothing is due:
// --interval, or less when the last walk of the tenants saw a payment
// falling due sooner (the spike's due second is then claimed on time, not
// up to an interval late), never less than idleFloor.
func (s *Sweeper) idle(now time.Time) time.Duration {
	d := s.cfg.Interval
	if next := s.fair.NextDue(); !next.IsZero() {
		// A few ms after: the database's clock says when it is due.
		d = min(d, max(idleFloor, next.Sub(now)+5*time.Millisecond))
	}
	return d
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

// dispatch sends a claimed batch to e and follows its outcomes as they
// are recorded, handing back each payment's credit as its outcome arrives.
func (s *Sweeper) dispatch(ctx context.Context, e *executor, claimed []store.Claimed, probe bool) {
	defer s.wg.Done()
	span := trace.SpanFromContext(ctx)
	defer span.End()
	outstanding := int64(len(claimed))
	// Each payment's tenant, until its outcome comes back: the fair
	// scheduler counts what each tenant has in flight.
	tenantOf := make(map[string]string, len(claimed))
	for _, c := range claimed {
		tenantOf[c.ID.String()] = c.Tenant
	}
	defer func() {
		for _, t := range tenantOf {
			s.fair.Done(t, 1)
		}
		e.free.Add(outstanding)
		if e.streams.Add(-1) == 0 && e.gone.Load() {
			_ = e.cc.Close()
		}
		s.signal()
	}()
	req := &internalv1.ExecuteRequest{SweeperId: s.cfg.ID, Items: make([]*internalv1.WorkItem, len(claimed))}
	for i, c := range claimed {
		req.Items[i] = &internalv1.WorkItem{PaymentId: c.ID.String(), DueTime: timestamppb.New(c.DueTime), Attempt: c.Attempt}
	}
	// The batch's deadline is its lease: by then the reaper may take it
	// back, and the executor starts no call that would outlive it.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Lease)
	defer cancel()
	var counts [8]int
	good, bad := 0, 0
	received := 0
	stream, err := e.client.Execute(ctx, req)
	if err == nil {
		// Every Execute says again what lease the executor needs: one
		// restarted with longer timeouts stops getting work at once.
		// (A stream that failed has no header; Recv reports why.)
		if md, herr := stream.Header(); herr == nil {
			s.admit(e, md, false)
		}
	}
	for err == nil {
		var msg *internalv1.ExecuteResponse
		if msg, err = stream.Recv(); err != nil {
			break
		}
		g, b := 0, 0
		for _, o := range msg.GetOutcomes() {
			if t, ok := tenantOf[o.GetPaymentId()]; ok {
				s.fair.Done(t, 1)
				delete(tenantOf, o.GetPaymentId())
			}
			if r := int(o.GetResult()); r < len(counts) {
				counts[r]++
			}
			switch {
			case o.GetResult() == internalv1.Result_RESULT_FENCED || o.GetResult() == internalv1.Result_RESULT_RELEASED ||
				o.GetResult() == internalv1.Result_RESULT_UNRECORDED:
			case o.GetGatewayOk():
				g++
			default:
				b++
			}
		}
		received += len(msg.GetOutcomes())
		outstanding -= int64(len(msg.GetOutcomes()))
		e.free.Add(int64(len(msg.GetOutcomes())))
		s.signal()
		good, bad = good+g, bad+b
		if !probe {
			s.cfg.Breaker.Record(g, b, false, time.Now())
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if probe {
		if good+bad > 0 {
			s.cfg.Breaker.Record(good, bad, true, time.Now())
		} else {
			s.cfg.Breaker.Abort(true)
		}
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("paysched.batch.succeeded", counts[internalv1.Result_RESULT_SUCCEEDED]),
			attribute.Int("paysched.batch.declined", counts[internalv1.Result_RESULT_DECLINED]),
			attribute.Int("paysched.batch.retry", counts[internalv1.Result_RESULT_RETRY]),
			attribute.Int("paysched.batch.dead_lettered", counts[internalv1.Result_RESULT_DEAD_LETTERED]),
			attribute.Int("paysched.batch.fenced", counts[internalv1.Result_RESULT_FENCED]),
			attribute.Int("paysched.batch.released", counts[internalv1.Result_RESULT_RELEASED]))
	}
	if err == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(otelcodes.Error, "dispatch failed")
	s.m.dispatchErrors.Inc()
	if code := status.Code(err); received == 0 && (code == codes.ResourceExhausted || code == codes.Aborted) {
		// The executor refused the batch before touching it: no attempt
		// can have reached the gateway, so the claims go back at once.
		n, rerr := store.Release(context.WithoutCancel(ctx), s.db, s.cfg.ID, claimed)
		s.m.released.Add(float64(n))
		s.log.Warn("executor refused the batch untouched; released it", "executor", e.addr, "err", err,
			"claimed", len(claimed), "released", n, "release_err", rerr)
		// Rest this executor a moment rather than give it more at once.
		time.Sleep(min(s.cfg.Interval, 200*time.Millisecond))
		return
	}
	s.log.Warn("dispatch failed; the claims are left to their lease, and the next attempts ask the gateway first",
		"executor", e.addr, "err", err, "claimed", len(claimed), "outcomes", received)
}

func (s *Sweeper) shutdown() {
	defer s.stop()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.cfg.Grace):
		s.log.Warn("batches still in flight at shutdown; their leases will expire")
	}
	// Claims still out are with executors (or were lost with one): they are
	// not released here, for they may be charging; their leases expire.
	s.log.Info("sweeper stopped")
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.execs {
		_ = e.cc.Close()
	}
}

// boolGauge is a gauge's value for b: 1 or 0.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
