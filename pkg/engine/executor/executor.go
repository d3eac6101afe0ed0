// Package executor runs claimed payments. For each Execute it reads the
// claimed rows (the charge's parameters come from there, never from the
// request), hands each payment to a pool of gateway callers, and a few
// completers (pkg/engine/completer) write the outcomes of many payments
// per statement, across batches. Each outcome is streamed back to the sweeper as soon as it is
// written, so a slow charge holds only itself.
//
// The money rules it keeps (docs/DESIGN.md, "The executor"):
//   - it charges only rows still PROCESSING at the claimed attempt;
//   - it never starts a call whose deadline falls after the claim's lease;
//   - a payment an earlier attempt may have charged (probe_first) is asked
//     about (GetCharge) before it is charged again;
//   - gateway answers are read strictly (pkg/gateway.Read).
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/engine/completer"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/coalesce"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store"
)

// Config is an executor's configuration.
type Config struct {
	ID string
	// MaxInFlight bounds the payments held at once across batches; a batch
	// beyond it is refused untouched (RESOURCE_EXHAUSTED) and the sweeper
	// releases it.
	MaxInFlight int
	// Concurrency bounds gateway calls in flight.
	Concurrency int
	// Backoff is the retry schedule; its length is the retry budget.
	Backoff payment.Backoff
	// Completers is how many completion statements run at once (default 1:
	// one statement writes whatever is ready while the next outcomes
	// gather, and a second one halved the batches, whose fixed cost, a
	// plan and a commit, then showed: the spike ran ~6% slower).
	Completers int
	// CompleteBatch bounds the outcomes written per statement (default 1000).
	CompleteBatch int
	// CompleteWait is how long a completer holds the first outcome of a
	// statement for more to join it (--complete-wait, 50ms; 0: write what
	// is ready at once). It writes when CompleteBatch are ready or CompleteWait after
	// the first, and never holds an outcome past its call's deadline (the
	// lease's end less LeaseMargin): at a steady rate this turns one
	// statement per few outcomes into one per ~100, and a crash meanwhile
	// loses only what a crash during the write would (the lease expires and
	// the next attempt asks the gateway first).
	CompleteWait time.Duration
	// StreamLinger is how long the outcomes streamed back to a sweeper wait
	// for more to join their message (--stream-linger, 2ms; 0: none).
	StreamLinger time.Duration
	// LeaseMargin is kept between a call's deadline and the end of its
	// claim's lease, for clock skew and the outcome write (default 2s).
	LeaseMargin time.Duration
	// MaxReleases is how many claims of one payment in a row may be
	// released untouched (the lease could not hold a call) before it is
	// dead-lettered LEASE_TOO_SHORT rather than claimed again (default 5).
	MaxReleases int
	// PayeeRate paces charges per payee in this executor (charges per
	// second; 0: none), with a burst of PayeeBurst: a payment over it goes
	// back to PENDING until its turn, holding no lease.
	PayeeRate  float64
	PayeeBurst int
}

// MinLeaseHeader is the response header in which an executor tells a
// sweeper, as each Execute stream opens, the shortest lease it can work
// under (milliseconds): the longest call it may make plus its margin. A
// sweeper with a shorter --lease would only loop claim, release, claim.
const MinLeaseHeader = "paysched-min-lease-ms"

// Validate reports the first configuration error.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return errors.New("--id must not be empty")
	case c.MaxInFlight < 1:
		return fmt.Errorf("--max-in-flight must be at least 1, got %d", c.MaxInFlight)
	case c.Concurrency < 1:
		// Zero callers would take every batch and never charge it.
		return fmt.Errorf("--concurrency must be at least 1, got %d", c.Concurrency)
	case c.Completers < 0:
		return fmt.Errorf("--completers must be at least 1, got %d", c.Completers)
	case c.CompleteBatch < 0:
		return fmt.Errorf("--complete-batch must be at least 1, got %d", c.CompleteBatch)
	case c.CompleteWait < 0 || c.CompleteWait > time.Second:
		// Held outcomes hold their payments' credits at the sweeper: a long
		// wait starves the claims, whatever the lease says.
		return fmt.Errorf("--complete-wait must be between 0 and 1s, got %s", c.CompleteWait)
	case c.StreamLinger < 0 || c.StreamLinger > 100*time.Millisecond:
		return fmt.Errorf("--stream-linger must be between 0 and 100ms, got %s", c.StreamLinger)
	case c.LeaseMargin < 0:
		return fmt.Errorf("--lease-margin must not be negative, got %s", c.LeaseMargin)
	case c.MaxReleases < 0:
		return fmt.Errorf("--max-releases must be at least 1, got %d", c.MaxReleases)
	case c.PayeeRate < 0 || c.PayeeRate != c.PayeeRate:
		return fmt.Errorf("--payee-rate must not be negative (0: none), got %g", c.PayeeRate)
	case c.PayeeBurst < 0:
		return fmt.Errorf("--payee-burst must not be negative, got %d", c.PayeeBurst)
	}
	return nil
}

// Server implements ExecutorService.
type Server struct {
	internalv1.UnimplementedExecutorServiceServer
	cfg      Config
	db       pgdb.DB
	charger  *gateway.Charger
	log      *slog.Logger
	inflight atomic.Int64
	jobs     chan *task
	done     chan *task
	m        metrics
	payees   *payeePacer
	// held is how many outcomes a completer holds or is writing: chaos
	// reads it to kill an executor while it holds some.
	held prometheus.Gauge
}

// task is one claimed payment on its way through the executor.
type task struct {
	// ctx ends at the batch's call deadline: its lease's end less the
	// margin.
	ctx context.Context
	w   store.ClaimedPayment
	// leaseEnd is when the claim's lease ends by this process's clock,
	// measured conservatively: the database's "lease left" counted from
	// before the batch was read.
	leaseEnd time.Time
	// margin is the executor's LeaseMargin.
	margin time.Duration
	out    chan<- *internalv1.Outcome
	tr     store.Transition
	result internalv1.Result
	// gatewayOK feeds the sweeper's breaker.
	gatewayOK bool
}

type metrics struct {
	outcomes   *prometheus.CounterVec
	latency    prometheus.Histogram
	fenced     prometheus.Counter
	dead       prometheus.Counter
	released   prometheus.Counter
	paced      prometheus.Counter
	early      prometheus.Counter
	mismatches prometheus.Counter
	unrecorded prometheus.Counter
	poisoned   prometheus.Counter
	tooShort   prometheus.Counter
	flush      prometheus.Histogram
}

// New returns an executor.
func New(cfg Config, db pgdb.DB, charger *gateway.Charger, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("executor config: %w", err)
	}
	if cfg.Completers == 0 {
		cfg.Completers = 1
	}
	if cfg.CompleteBatch == 0 {
		cfg.CompleteBatch = 1000
	}
	if cfg.LeaseMargin == 0 {
		cfg.LeaseMargin = 2 * time.Second
	}
	payees := newPayeePacer(cfg.PayeeRate, cfg.PayeeBurst)
	if cfg.MaxReleases == 0 {
		cfg.MaxReleases = 5
	}
	s := &Server{cfg: cfg, db: db, charger: charger, log: log, payees: payees,
		// Buffered to MaxInFlight: admission already bounds what is queued,
		// so handing work on never blocks.
		jobs: make(chan *task, cfg.MaxInFlight), done: make(chan *task, cfg.MaxInFlight)}
	s.m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "paysched_gateway_outcomes_total", Help: "Gateway attempts by outcome."}, []string{"outcome"})
	s.m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "paysched_gateway_latency_seconds", Help: "Gateway call latency per payment, probes included.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 10)})
	s.m.fenced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_executor_fenced_total", Help: "Outcomes not applied: the attempt was no longer current."})
	// Same name as before: it counts every arrival in the dead-letter queue.
	s.m.dead = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_dead_letters_total", Help: "Payments dead-lettered by this executor."})
	s.m.paced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_executor_payee_paced_total", Help: "Claims handed back to PENDING until their payee's turn (--payee-rate)."})
	s.m.early = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_executor_absence_too_soon_total", Help: "Claims handed back to PENDING because the gateway proved an absence sooner than its longest request after the payment's last one (--gateway-max-request): asked again once it counts."})
	s.m.released = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_executor_released_total", Help: "Claims not started: the lease would have ended before the call's deadline."})
	s.m.mismatches = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_gateway_mismatches_total", Help: "Gateway answers naming another key, amount or currency than the payment's (alert: never a success)."})
	s.m.unrecorded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_executor_unrecorded_total", Help: "Outcomes that could not be written (the lease expires; the next attempt probes)."})
	s.m.poisoned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_executor_unrecordable_total", Help: "Outcomes the database refused even alone, written instead as a dead letter OUTCOME_UNRECORDABLE (the rest of their batch recorded row by row)."})
	s.m.tooShort = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paysched_executor_lease_too_short_total", Help: "Payments dead-lettered LEASE_TOO_SHORT: released untouched --max-releases times in a row."})
	s.m.flush = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "paysched_executor_complete_batch_size", Help: "Outcomes written per completion statement.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12)})
	s.held = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "paysched_executor_outcomes_held", Help: "Outcomes a completer holds for its next statement or is writing (--complete-wait)."})
	reg.MustRegister(s.m.outcomes, s.m.latency, s.m.fenced, s.m.dead, s.m.released, s.m.paced, s.m.early, s.m.mismatches, s.m.unrecorded,
		s.m.poisoned, s.m.tooShort, s.m.flush, s.held)
	gateway.RegisterMetrics(reg)
	// Fixed pools: callers bound gateway concurrency, and long-lived
	// goroutines keep their grown stacks instead of regrowing one per call.
	for range cfg.Concurrency {
		go s.caller()
	}
	ccfg := completer.Config{Batch: cfg.CompleteBatch, Wait: cfg.CompleteWait}
	for range cfg.Completers {
		go completer.Run(ccfg, s.done, s.flush, func(n int) { s.held.Set(float64(n)) })
	}
	return s, nil
}

// MinLease is the shortest lease this executor works under without
// cutting any call short: its longest attempt (a probe first, the charge,
// the probe after an uncertain answer, the cancel of an undecided charge)
// and its margin. Sweepers refuse to give it work under a shorter --lease.
func (s *Server) MinLease() time.Duration {
	return s.charger.Deadline(true) + s.cfg.LeaseMargin
}

// Execute implements ExecutorService.
func (s *Server) Execute(req *internalv1.ExecuteRequest, stream internalv1.ExecutorService_ExecuteServer) error {
	// The sweeper learns, before anything else, whether its lease can hold
	// this executor's calls at all.
	if err := stream.SendHeader(metadata.Pairs(MinLeaseHeader, strconv.FormatInt(s.MinLease().Milliseconds(), 10))); err != nil {
		return err
	}
	items := make([]store.ClaimRef, 0, len(req.GetItems()))
	seen := make(map[uuid.UUID]bool, len(req.GetItems()))
	for _, w := range req.GetItems() {
		id, err := uuid.Parse(w.GetPaymentId())
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "payment id %q", w.GetPaymentId())
		}
		if seen[id] {
			// One claim is one attempt: a payment twice in a batch is a bug
			// or a forgery, and nothing of the batch is started.
			return status.Errorf(codes.InvalidArgument, "payment %s appears twice in the batch", id)
		}
		seen[id] = true
		items = append(items, store.ClaimRef{ID: id, DueTime: w.GetDueTime().AsTime(), Attempt: w.GetAttempt()})
	}
	n := int64(len(items))
	if n == 0 {
		return nil
	}
	if s.inflight.Add(n) > int64(s.cfg.MaxInFlight) {
		s.inflight.Add(-n)
		return status.Error(codes.ResourceExhausted, "executor at capacity")
	}
	// The work must finish even if the sweeper goes away: outcomes are
	// money's record. Each call is bounded by the gateway timeouts.
	ctx := context.WithoutCancel(stream.Context())
	// The lease left is read by the database's clock, as lease_until (set
	// by the claim) minus its now; it is counted from before the read was
	// sent, so the time the read took is never counted as lease.
	readAt := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	works, err := store.LoadClaimed(lctx, s.db, items)
	cancel()
	if err != nil {
		s.inflight.Add(-n)
		s.log.Error("load batch", "err", err, "items", n)
		// Nothing was started: the sweeper may release the claims.
		return status.Error(codes.Aborted, "could not read the batch; nothing was started")
	}
	out := make(chan *internalv1.Outcome, n)
	loaded := make(map[store.ClaimRef]bool, len(works))
	// Every call of the batch ends by its claim's lease end less the
	// margin, whatever its own timeout says: no call outlives the claim.
	// One deadline serves the whole batch (a claim's rows share their
	// lease; the earliest is taken), rather than a timer per call; it ends
	// with the batch, whose every outcome this handler waits for below.
	var end time.Time
	for i, w := range works {
		if le := readAt.Add(w.LeaseLeft); i == 0 || le.Before(end) {
			end = le
		}
	}
	bctx, bcancel := context.WithDeadline(ctx, end.Add(-s.cfg.LeaseMargin))
	defer bcancel()
	for _, w := range works {
		loaded[store.ClaimRef{ID: w.ID, Attempt: w.Attempt}] = true
		t := &task{ctx: bctx, w: w, leaseEnd: readAt.Add(w.LeaseLeft), margin: s.cfg.LeaseMargin, out: out, gatewayOK: true}
		if s.cfg.Backoff.Spent(w.Retries) && !w.ProbeFirst {
			// Spent by expired leases whose attempts were all settled as
			// not charged: nothing to ask, nothing more to try.
			t.tr = store.Transition{ClaimRef: w.ClaimRef, Status: payment.DeadLettered, DeadReason: payment.RetriesExhausted,
				NewRetries: w.Retries, Error: "retry budget spent", Releases: w.Releases}
			t.result = internalv1.Result_RESULT_DEAD_LETTERED
			s.done <- t
			continue
		}
		s.jobs <- t
	}
	for _, it := range items {
		if !loaded[store.ClaimRef{ID: it.ID, Attempt: it.Attempt}] {
			// Not PROCESSING at that attempt: another process has it.
			s.m.fenced.Inc()
			s.inflight.Add(-1)
			out <- &internalv1.Outcome{PaymentId: it.ID.String(), Result: internalv1.Result_RESULT_FENCED, GatewayOk: true}
		}
	}
	var sendErr error
	msg := &internalv1.ExecuteResponse{}
	for got := int64(0); got < n; {
		// What comes back within the linger shares a message: outcomes
		// arrive a completer's statement at a time, and each message is a
		// write and a wake-up on both sides.
		msg.Outcomes, _ = coalesce.Gather(msg.Outcomes[:0], <-out, out, int(n-got), s.cfg.StreamLinger)
		got += int64(len(msg.Outcomes))
		if sendErr == nil {
			// After a send error the sweeper is gone; the rest of the batch
			// still finishes and is recorded (out is buffered for all of it).
			sendErr = stream.Send(msg)
		}
	}
	return sendErr
}

// caller makes the gateway calls of one task at a time.
func (s *Server) caller() {
	for t := range s.jobs {
		s.call(t)
		s.done <- t
	}
}

// call decides one task: release it, probe it, charge it.
func (s *Server) call(t *task) {
	w := t.w
	// Lease discipline: start only if the lease holds the probe that must
	// come first and the charge itself, with the margin; every call of the
	// attempt then ends by the lease's end less the margin (the deadline
	// below), so what follows an uncertain answer (the probe, a cancel)
	// gets what is left, and a probe cut short is only ambiguous.
	need := s.charger.ChargeTimeout + s.cfg.LeaseMargin
	if w.ProbeFirst {
		need += s.charger.ProbeTimeout
	}
	if time.Now().Add(need).After(t.leaseEnd) {
		s.m.released.Inc()
		t.tr = store.Transition{ClaimRef: w.ClaimRef, Status: payment.Pending, NewRetries: w.Retries, ProbeFirst: w.ProbeFirst,
			Releases: w.Releases + 1}
		t.result = internalv1.Result_RESULT_RELEASED
		if int(w.Releases)+1 >= s.cfg.MaxReleases {
			// Claimed and released again and again, nothing charged, nothing
			// learned: the lease cannot hold a call. Looping helps nobody.
			s.m.tooShort.Inc()
			t.tr.Status, t.tr.DeadReason = payment.DeadLettered, payment.LeaseTooShort
			t.tr.Error = fmt.Sprintf("released untouched %d times in a row: each claim's lease left less than the %s a charge needs (raise the sweepers' --lease)",
				w.Releases+1, need)
			t.result = internalv1.Result_RESULT_DEAD_LETTERED
		}
		return
	}
	if turn := s.payees.take(w.ID.String(), w.Payee, time.Now()); turn.After(time.Now()) {
		// Its payee is over --payee-rate: back to PENDING until its turn,
		// holding no lease. Nothing was sent, so this is a release; it is
		// not counted towards LEASE_TOO_SHORT (the lease was long enough).
		s.m.paced.Inc()
		t.tr = store.Transition{ClaimRef: w.ClaimRef, Status: payment.Pending, NewRetries: w.Retries, ProbeFirst: w.ProbeFirst,
			Releases: w.Releases, RunAt: turn}
		t.result = internalv1.Result_RESULT_RELEASED
		return
	}
	// t.ctx ends by the batch's lease end less the margin (Execute).
	ctx := t.ctx
	p := gateway.ChargeInput{ID: w.ID.String(), Payer: w.Payer, Payee: w.Payee, Currency: w.Currency, Amount: w.Amount, DueAt: w.DueTime,
		SentBy: w.SentBy}
	start := time.Now()
	var r gateway.Result
	// proven: this attempt learned from the gateway, by a strongly
	// consistent read, that no earlier attempt charged the payment.
	proven := false
	if w.ProbeFirst {
		// An earlier attempt may have charged it: ask before charging again,
		// for the gateway may have forgotten the key (Stripe: after 24 h).
		// Only a proven absence lets it charge again (or end without a
		// charge): an index that may lag says nothing.
		r = s.charger.Probe(ctx, p)
		if !r.ProvableAt.IsZero() {
			// No charge yet, but an earlier request may still be made at
			// the gateway: back to PENDING until the absence counts, asking
			// first again. Nothing was sent: no attempt, no budget spent,
			// not a short lease's release (the payment's bound stays).
			s.m.early.Inc()
			t.tr = store.Transition{ClaimRef: w.ClaimRef, Status: payment.Pending, NewRetries: w.Retries, ProbeFirst: true,
				Releases: w.Releases, RunAt: r.ProvableAt, Error: r.Error}
			t.result = internalv1.Result_RESULT_RELEASED
			return
		}
		if r.Absent {
			proven = true
			if s.cfg.Backoff.Spent(w.Retries) {
				r.Error = "retry budget spent; the gateway proved it holds no charge"
			} else {
				r = s.chargeWithin(ctx, p, t.leaseEnd)
			}
		}
	} else {
		r = s.chargeWithin(ctx, p, t.leaseEnd)
	}
	s.m.latency.Observe(time.Since(start).Seconds())
	s.m.outcomes.WithLabelValues(string(r.Outcome)).Inc()
	t.gatewayOK = !r.Unhealthy
	t.tr = s.decide(w, r, proven, time.Now())
	t.tr.StartedAt = start
	switch t.tr.Status {
	case payment.Completed:
		t.result = internalv1.Result_RESULT_SUCCEEDED
	case payment.Failed:
		t.result = internalv1.Result_RESULT_DECLINED
	case payment.DeadLettered:
		t.result = internalv1.Result_RESULT_DEAD_LETTERED
	default:
		t.result = internalv1.Result_RESULT_RETRY
	}
}

// chargeWithin charges p with the charge's deadline capped at the lease's
// end less the margin.
func (s *Server) chargeWithin(ctx context.Context, p gateway.ChargeInput, leaseEnd time.Time) gateway.Result {
	limit := time.Until(leaseEnd) - s.cfg.LeaseMargin
	return s.charger.ChargeWithin(ctx, p, max(limit, time.Millisecond))
}

// decide maps an attempt's result to the payment's next state. proven:
// the attempt's probe proved no earlier attempt charged it.
func (s *Server) decide(w store.ClaimedPayment, r gateway.Result, proven bool, now time.Time) store.Transition {
	t := store.Transition{ClaimRef: w.ClaimRef, Outcome: r.Outcome, Ref: r.Ref, Error: r.Error, NewRetries: w.Retries}
	// May it be charged? This attempt's own request may have landed
	// (Uncertain), or an earlier one may have that this attempt did not
	// disprove: probe_first is only ever cleared by a proven absence.
	mayBeCharged := r.Uncertain || (w.ProbeFirst && !proven)
	switch {
	case r.Outcome == payment.Succeeded:
		t.Status, t.Error = payment.Completed, ""
	case r.Outcome == payment.Declined:
		t.Status, t.FailReason = payment.Failed, r.FailReason
		if t.FailReason == "" {
			t.FailReason = payment.FailDeclined
		}
	case r.Outcome == payment.KeyConflict:
		t.Status, t.DeadReason, t.ProbeFirst = payment.DeadLettered, payment.KeyConflicted, mayBeCharged
	case r.Mismatch:
		// The gateway speaks of another charge: never a success, and
		// retrying will not make it this payment's. A human looks.
		s.m.mismatches.Inc()
		s.log.Error("gateway answered a charge that is not this payment's", "payment", w.ID, "err", r.Error)
		t.Status, t.DeadReason, t.ProbeFirst = payment.DeadLettered, payment.AmbiguousUnresolved, true
	case s.cfg.Backoff.Spent(w.Retries) || s.cfg.Backoff.Exhausted(w.Retries):
		// RETRIES_EXHAUSTED says "not charged": only when proven.
		t.Status, t.DeadReason, t.ProbeFirst = payment.DeadLettered, payment.RetriesExhausted, mayBeCharged
		if mayBeCharged {
			t.DeadReason = payment.AmbiguousUnresolved
		}
	default:
		t.Status = payment.Pending
		t.RunAt = now.Add(s.cfg.Backoff.Delay(w.Retries))
		t.NewRetries = w.Retries + 1
		t.ProbeFirst = mayBeCharged
	}
	return t
}

// HoldLimit is how long a completer may hold t's outcome: until its
// call's deadline, the lease's end less LeaseMargin, so the margin is left
// whole for the write, as if there were no wait. An outcome that comes
// later (a release decided at the lease's edge) is written at once.
func (t *task) HoldLimit() time.Time { return t.leaseEnd.Add(-t.margin) }

// flush writes ts, retrying briefly, and reports each outcome. A batch
// the database refuses is written row by row, so one bad row costs only
// itself: it is dead-lettered OUTCOME_UNRECORDABLE, and the rest are
// recorded.
func (s *Server) flush(ts []*task) {
	trs := make([]store.Transition, len(ts))
	for i, t := range ts {
		trs[i] = t.tr
	}
	s.m.flush.Observe(float64(len(ts)))
	applied, err := s.write(trs, 4)
	switch {
	case err != nil && len(ts) == 1 && !store.Transient(err):
		// A lone outcome the database refuses is dead-lettered at once, as
		// one found by the row-by-row pass would be: left unrecorded, it
		// would be refused again after every lease, forever.
		t := ts[0]
		var uerr error
		if applied, uerr = s.unrecordable(t, err); uerr != nil {
			t.result = internalv1.Result_RESULT_UNRECORDED
			s.log.Error("outcome not recorded; its lease will expire and the next attempt probes", "payment", t.w.ID, "err", uerr)
		}
		err = nil
	case err != nil && len(ts) > 1:
		s.log.Warn("outcome batch refused; writing it row by row", "err", err, "items", len(ts))
		applied, err = map[store.Applied]bool{}, nil
		for i, t := range ts {
			a, rerr := s.write(trs[i:i+1], 2)
			if rerr != nil && !store.Transient(rerr) {
				a, rerr = s.unrecordable(t, rerr)
			}
			if rerr != nil {
				// Nothing recorded for it: its lease expires and the next
				// attempt asks the gateway first.
				t.result = internalv1.Result_RESULT_UNRECORDED
				s.log.Error("outcome not recorded; its lease will expire and the next attempt probes", "payment", t.w.ID, "err", rerr)
				continue
			}
			maps.Copy(applied, a)
		}
	}
	for _, t := range ts {
		res := t.result
		switch {
		case err != nil || res == internalv1.Result_RESULT_UNRECORDED:
			// The leases expire; the reaper sets probe_first, so the next
			// attempt asks the gateway what this one did.
			res = internalv1.Result_RESULT_UNRECORDED
			s.m.unrecorded.Inc()
		case !applied[store.Applied{ID: t.w.ID, Attempt: t.w.Attempt}]:
			res = internalv1.Result_RESULT_FENCED
			s.m.fenced.Inc()
		case t.tr.Status == payment.DeadLettered:
			s.m.dead.Inc()
		}
		s.inflight.Add(-1)
		t.out <- &internalv1.Outcome{PaymentId: t.w.ID.String(), Result: res, GatewayOk: t.gatewayOK}
	}
	if err != nil {
		s.log.Error("outcomes not recorded; their leases will expire and the next attempts probe", "err", err, "items", len(ts))
	}
}

// write runs store.Complete up to tries times, with a growing pause.
func (s *Server) write(trs []store.Transition, tries int) (map[store.Applied]bool, error) {
	var applied map[store.Applied]bool
	var err error
	for try, wait := 0, 100*time.Millisecond; try < tries; try, wait = try+1, wait*3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		applied, err = store.Complete(ctx, s.db, s.cfg.ID, trs)
		cancel()
		if err == nil || !store.Transient(err) {
			return applied, err
		}
		s.log.Warn("complete attempts; retrying", "err", err, "items", len(trs), "try", try)
		time.Sleep(wait)
	}
	return applied, err
}

// unrecordable writes, for a task whose outcome the database refused on
// its own, what can always be written: a dead letter OUTCOME_UNRECORDABLE
// with a plain message, still asking first (whatever the gateway said, it
// may have charged), and an attempt row AMBIGUOUS.
func (s *Server) unrecordable(t *task, cause error) (map[store.Applied]bool, error) {
	s.m.poisoned.Inc()
	s.log.Error("outcome refused by the database; dead-lettering the payment OUTCOME_UNRECORDABLE", "payment", t.w.ID, "err", cause)
	tr := store.Transition{ClaimRef: t.w.ClaimRef, Outcome: payment.Ambiguous, StartedAt: t.tr.StartedAt,
		Status: payment.DeadLettered, DeadReason: payment.OutcomeUnrecordable, NewRetries: t.w.Retries, ProbeFirst: true,
		Error: "the gateway's answer could not be recorded (" + gateway.Clean(string(t.tr.Outcome), 40) + "): " +
			gateway.Clean(cause.Error(), 300)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	applied, err := store.Complete(ctx, s.db, s.cfg.ID, []store.Transition{tr})
	if err != nil {
		return nil, err
	}
	t.tr = tr
	t.result = internalv1.Result_RESULT_DEAD_LETTERED
	return applied, nil
}
