// Package executor runs claimed batches: it starts each attempt (fenced),
// charges the gateway with key = paymentId under bounded concurrency, and
// records every outcome in one fenced batch before answering the sweeper.
package executor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/outcome"
	"github.com/paysched/paysched/pkg/retry"
)

// Config sizes an executor.
type Config struct {
	ID string
	// MaxBatches is how many batches run at once; beyond it Execute answers
	// RESOURCE_EXHAUSTED and the sweeper releases the claim.
	MaxBatches int
	// Concurrency bounds gateway calls in flight across all batches.
	Concurrency int
	Backoff     retry.Schedule
}

// Server implements ExecutorService.
type Server struct {
	internalv1.UnimplementedExecutorServiceServer
	cfg     Config
	db      *pgxpool.Pool
	charger *gateway.Charger
	log     *slog.Logger
	batches chan struct{}
	jobs    chan job
	m       metrics
}

// job is one gateway call for a worker of the pool.
type job struct {
	ctx  context.Context
	p    gateway.Payment
	out  *gateway.Result
	done *sync.WaitGroup
}

type metrics struct {
	outcomes *prometheus.CounterVec
	latency  prometheus.Histogram
	fenced   prometheus.Counter
	dead     prometheus.Counter
}

// New returns an executor.
func New(cfg Config, db *pgxpool.Pool, charger *gateway.Charger, reg prometheus.Registerer, log *slog.Logger) *Server {
	s := &Server{cfg: cfg, db: db, charger: charger, log: log,
		batches: make(chan struct{}, cfg.MaxBatches), jobs: make(chan job)}
	// A fixed pool of callers bounds gateway concurrency; long-lived
	// goroutines keep their grown stacks instead of regrowing one per call.
	for range cfg.Concurrency {
		go s.worker()
	}
	s.m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paysched_gateway_outcomes_total", Help: "Gateway attempts by outcome."}, []string{"outcome"})
	s.m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "paysched_gateway_latency_seconds", Help: "Gateway charge latency, probe included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 10)})
	s.m.fenced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_executor_fenced_total", Help: "Outcomes not applied: the attempt was no longer current."})
	// Same name as the reaper's: together they count every arrival in the
	// dead-letter queue (the executor's: budget spent or ambiguity unresolved).
	s.m.dead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_dead_letters_total", Help: "Payments dead-lettered by this executor (outcomes decided; a fenced one is rare)."})
	reg.MustRegister(s.m.outcomes, s.m.latency, s.m.fenced, s.m.dead)
	return s
}

// Execute implements ExecutorService.
func (s *Server) Execute(ctx context.Context, req *internalv1.ExecuteRequest) (*internalv1.ExecuteResponse, error) {
	select {
	case s.batches <- struct{}{}:
		defer func() { <-s.batches }()
	default:
		return nil, status.Error(codes.ResourceExhausted, "executor at capacity")
	}
	items := make([]outcome.Item, 0, len(req.GetItems()))
	pay := make(map[uuid.UUID]*internalv1.WorkItem, len(req.GetItems()))
	for _, w := range req.GetItems() {
		id, err := uuid.Parse(w.GetPaymentId())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "payment id %q", w.GetPaymentId())
		}
		items = append(items, outcome.Item{ID: id, DueTime: w.GetDueTime().AsTime(), Attempt: w.GetAttempt(), Retries: w.GetRetries()})
		pay[id] = w
	}
	// The work must finish even if the sweeper goes away: outcomes are
	// money's record. It is bounded by the gateway timeouts.
	wctx := context.WithoutCancel(ctx)
	started, err := outcome.Start(wctx, s.db, s.cfg.ID, items)
	if err != nil {
		s.log.Error("start attempts", "err", err)
		return nil, status.Error(codes.Unavailable, "could not start attempts")
	}
	resp := &internalv1.ExecuteResponse{Fenced: int32(len(items) - len(started))}
	results := make([]gateway.Result, len(started))
	var wg sync.WaitGroup
	wg.Add(len(started))
	for i, it := range started {
		w := pay[it.ID]
		s.jobs <- job{ctx: wctx, out: &results[i], done: &wg, p: gateway.Payment{ID: w.GetPaymentId(),
			Payer: w.GetPayer(), Payee: w.GetPayee(), Currency: w.GetCurrency(), Amount: w.GetAmount()}}
	}
	wg.Wait()
	now := time.Now()
	ts := make([]outcome.Transition, len(started))
	for i, it := range started {
		r := results[i]
		s.m.outcomes.WithLabelValues(string(r.Outcome)).Inc()
		ts[i] = s.decide(it, r, now)
		switch r.Outcome {
		case gateway.Succeeded:
			resp.Succeeded++
		case gateway.Declined:
			resp.Declined++
		case gateway.Retryable:
			resp.Retryable++
		case gateway.Ambiguous:
			resp.Ambiguous++
		}
		if ts[i].Status == "DEAD_LETTERED" {
			resp.DeadLettered++
		}
	}
	if len(ts) > 0 {
		applied, err := outcome.Record(wctx, s.db, ts)
		if err != nil {
			// Leases expire and the reaper retries with the same key.
			s.log.Error("record outcomes", "err", err, "items", len(ts))
			return nil, status.Error(codes.Internal, "could not record outcomes")
		}
		s.m.dead.Add(float64(resp.DeadLettered))
		if f := len(ts) - applied; f > 0 {
			resp.Fenced += int32(f)
			s.m.fenced.Add(float64(f))
			s.log.Warn("late outcomes fenced out", "count", f)
		}
	}
	return resp, nil
}

func (s *Server) worker() {
	for j := range s.jobs {
		t0 := time.Now()
		*j.out = s.charger.Charge(j.ctx, j.p)
		s.m.latency.Observe(time.Since(t0).Seconds())
		j.done.Done()
	}
}

// decide maps an attempt's result to the payment's next state.
func (s *Server) decide(it outcome.Item, r gateway.Result, now time.Time) outcome.Transition {
	t := outcome.Transition{Item: it, Outcome: string(r.Outcome), Ref: r.Ref, Error: r.Error, NewRetries: it.Retries}
	switch r.Outcome {
	case gateway.Succeeded:
		t.Status, t.Error = "COMPLETED", ""
	case gateway.Declined:
		t.Status = "FAILED"
	default:
		if s.cfg.Backoff.Exhausted(it.Retries) {
			t.Status = "DEAD_LETTERED"
			t.DeadReason = "RETRIES_EXHAUSTED"
			if r.Outcome == gateway.Ambiguous {
				t.DeadReason = "AMBIGUOUS_UNRESOLVED"
			}
		} else {
			t.Status = "PENDING"
			t.RunAt = now.Add(s.cfg.Backoff.Delay(it.Retries))
			t.NewRetries = it.Retries + 1
		}
	}
	return t
}
