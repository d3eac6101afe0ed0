// Package executor runs claimed batches: it starts each attempt (fenced),
// charges the gateway with key = paymentId under bounded concurrency, and
// records every outcome in one fenced batch before answering the sweeper.
package executor

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// Config sizes an executor.
type Config struct {
	ID string
	// MaxBatches is how many batches run at once; beyond it Execute answers
	// RESOURCE_EXHAUSTED and the sweeper releases the store.
	MaxBatches int
	// Concurrency bounds gateway calls in flight across all batches.
	Concurrency int
	Backoff     payment.Backoff
}

// Validate reports the first configuration error.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return errors.New("--id must not be empty")
	case c.MaxBatches < 1:
		return fmt.Errorf("--max-batches must be at least 1, got %d", c.MaxBatches)
	case c.Concurrency < 1:
		// Zero workers would take every batch and never charge it.
		return fmt.Errorf("--concurrency must be at least 1, got %d", c.Concurrency)
	}
	return nil
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
func New(cfg Config, db *pgxpool.Pool, charger *gateway.Charger, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
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
	return s, nil
}

// Execute implements ExecutorService.
func (s *Server) Execute(ctx context.Context, req *internalv1.ExecuteRequest) (*internalv1.ExecuteResponse, error) {
	select {
	case s.batches <- struct{}{}:
		defer func() { <-s.batches }()
	default:
		return nil, status.Error(codes.ResourceExhausted, "executor at capacity")
	}
	items := make([]store.Item, 0, len(req.GetItems()))
	pay := make(map[uuid.UUID]*internalv1.WorkItem, len(req.GetItems()))
	for _, w := range req.GetItems() {
		id, err := uuid.Parse(w.GetPaymentId())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "payment id %q", w.GetPaymentId())
		}
		items = append(items, store.Item{ID: id, DueTime: w.GetDueTime().AsTime(), Attempt: w.GetAttempt(), Retries: w.GetRetries()})
		pay[id] = w
	}
	// The work must finish even if the sweeper goes away: outcomes are
	// money's record. It is bounded by the gateway timeouts.
	wctx := context.WithoutCancel(ctx)
	// A payment whose budget expired leases spent is not charged again:
	// it is dead-lettered with the batch's outcomes.
	var ts []store.Transition
	live := items[:0]
	for _, it := range items {
		if s.cfg.Backoff.Spent(it.Retries) {
			ts = append(ts, store.Transition{Item: it, Status: payment.DeadLettered, DeadReason: payment.RetriesExhausted,
				NewRetries: it.Retries, Error: "lease expired: retry budget spent"})
			continue
		}
		live = append(live, it)
	}
	resp := &internalv1.ExecuteResponse{DeadLettered: int32(len(ts))}
	started, err := store.Start(wctx, s.db, s.cfg.ID, live)
	if err != nil {
		s.log.Error("start attempts", "err", err)
		return nil, status.Error(codes.Unavailable, "could not start attempts")
	}
	resp.Fenced = int32(len(live) - len(started))
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
	for i, it := range started {
		r := results[i]
		s.m.outcomes.WithLabelValues(string(r.Outcome)).Inc()
		t := s.decide(it, r, now)
		ts = append(ts, t)
		switch r.Outcome {
		case payment.Succeeded:
			resp.Succeeded++
		case payment.Declined:
			resp.Declined++
		case payment.Retryable:
			resp.Retryable++
		case payment.Ambiguous:
			resp.Ambiguous++
		}
		if t.Status == payment.DeadLettered {
			resp.DeadLettered++
		}
	}
	if len(ts) > 0 {
		applied, err := store.Record(wctx, s.db, ts)
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
func (s *Server) decide(it store.Item, r gateway.Result, now time.Time) store.Transition {
	t := store.Transition{Item: it, Outcome: r.Outcome, Ref: r.Ref, Error: r.Error, NewRetries: it.Retries}
	switch r.Outcome {
	case payment.Succeeded:
		t.Status, t.Error = payment.Completed, ""
	case payment.Declined:
		t.Status = payment.Failed
	default:
		if s.cfg.Backoff.Exhausted(it.Retries) {
			t.Status = payment.DeadLettered
			t.DeadReason = payment.RetriesExhausted
			if r.Outcome == payment.Ambiguous {
				t.DeadReason = payment.AmbiguousUnresolved
			}
		} else {
			t.Status = payment.Pending
			t.RunAt = now.Add(s.cfg.Backoff.Delay(it.Retries))
			t.NewRetries = it.Retries + 1
		}
	}
	return t
}
