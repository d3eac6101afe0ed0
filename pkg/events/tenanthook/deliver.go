package tenanthook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/events/tenanthook/deliverydb"
	"github.com/paysched/paysched/pkg/platform/periodic"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store"
)

// A delivery's states (webhook_deliveries.state).
const (
	// Waiting: to be attempted by the retry path, due at next_at, or under
	// way (leased).
	Waiting = "WAITING"
	// DeliveredState: an attempt got a 2xx.
	DeliveredState = "DELIVERED"
	// Undelivered: its attempts are spent, its endpoint answered 410, or
	// its endpoint was disabled when the event came; a recover makes it
	// Waiting again.
	Undelivered = "UNDELIVERED"
)

// ResponseCap is how much of a response an attempt keeps.
const ResponseCap = 4096

// Deliverer delivers notifications to their tenant's endpoints. Each
// endpoint has a lane: the attempts waiting for it, under way to it, and
// the slots (of its max_inflight, across dispatchers) and the rate it may
// use. A notification is attempted at once on the fast path (Submit); what
// becomes of it at each endpoint is recorded, in batches, as one row, and
// only then is it reported done (its Kafka offset may commit). A delivery
// that fails, or that cannot start within Handoff (its endpoint full or
// slowed by its rate), is recorded WAITING and left to the retry path,
// which claims due rows (SKIP LOCKED, a lease) for the lanes with room. A
// rate wait never holds a slot, and no wait outlives a lease.
type Deliverer struct {
	DB     pgdb.DB
	Client *http.Client
	// Schedule is the retries' delays (default DefaultSchedule).
	Schedule Schedule
	// Lease is how long a claimed retry is this process's: above the
	// client's timeout, so an attempt never outlives it.
	Lease time.Duration
	// Handoff is how long a delivery of the fast path may wait for its
	// endpoint before it is handed to the retry path (default 1 s).
	Handoff time.Duration
	// Poll is the retry path's pause between claims (default 200 ms).
	Poll time.Duration
	// Connect opens a session for the cross-dispatcher slots (advisory
	// locks); nil: this process alone counts max_inflight (a test, or a
	// single dispatcher).
	Connect func(context.Context) (*pgx.Conn, error)
	// Retention is how long finished deliveries and their messages are
	// kept (0: forever).
	Retention time.Duration
	// OnAttempt observes each attempt (metrics): its class, how long it
	// took, and, when delivered, how long after the notification.
	OnAttempt func(c Class, took, lag time.Duration)
	// OnDisabled announces an endpoint just disabled (the
	// paysched.webhook.endpoint_disabled event); see announce.
	OnDisabled func(context.Context, Disabled) error
	// OnHandOff counts deliveries handed to the retry path (waited) and
	// attempts held (ran past Handoff).
	OnHandOff func(waited, held int)
	Log       *slog.Logger
	Now       func() time.Time

	targets *targets
	slots   *slotLocks
	mu      sync.Mutex
	lanes   map[uuid.UUID]*lane
	out     chan result
	rng     *rand.Rand
	rngMu   sync.Mutex
	kick    chan struct{} // the slot keeper has work
	// retryKick: a lane with due retries has room again.
	retryKick chan struct{}
	// running counts attempts under way, for the drain at shutdown.
	running sync.WaitGroup
	workers workers
	ready   chan struct{}
	stopped atomic.Bool
	once    sync.Once
}

// message is one notification on its way to its endpoints.
type message struct {
	id, typ, tenant string
	payment         *uuid.UUID
	body            []byte
	noted           time.Time
	// pending counts its endpoints not yet recorded; done is called at 0.
	pending atomic.Int32
	done    func()
}

// job is one delivery to one endpoint: of the fast path (id 0: no row
// yet), or a claimed retry (its row and the attempt it makes, within its
// lease).
type job struct {
	m       *message
	t       *target
	id      int64
	attempt int
	leased  time.Time // a retry's lease end
	queued  time.Time
	// started is when a fast-path attempt began; phase says whether it
	// is running, held (recorded WAITING under a lease while it runs on:
	// its notification is done, see hold) or finished.
	started time.Time
	phase   atomic.Int32
}

// A fast-path attempt's phases.
const (
	running int32 = iota
	held
	finished
)

// result is what becomes of a job: a row to write.
type result struct {
	j     *job
	state string
	// late: the result of a fast-path attempt that was held (its row is
	// there, leased): it updates the row.
	late      bool
	lease     *time.Time
	next      time.Time
	at        *time.Time
	status    *int32
	latencyMS int32
	err, resp *string
}

// lane is one endpoint's attempts in this process.
type lane struct {
	id     uuid.UUID
	mu     sync.Mutex
	queue  []*job
	active int
	// slots held (their indices, and the session they were taken on).
	slots []int
	gen   int
	// the rate: tokens, refilled at the endpoint's max_per_second.
	tokens float64
	filled time.Time
	timer  *time.Timer
	// busyAt is when the lane last had work: idle slots are given back.
	busyAt time.Time
	// running are its fast-path attempts under way.
	running map[*job]struct{}
	// failingSince is the failure clock as this process last wrote it, at
	// failingAt: newer than the cache's until the cache reads again.
	failingSince *time.Time
	failingAt    time.Time
	// retryDue is when its retries are next due (zero: unknown, probe).
	retryDue time.Time
}

func (d *Deliverer) defaults() { d.once.Do(d.setDefaults) }

func (d *Deliverer) setDefaults() {
	if len(d.Schedule) == 0 {
		d.Schedule = DefaultSchedule
	}
	if d.Lease <= 0 {
		d.Lease = 30 * time.Second
	}
	if d.Handoff <= 0 {
		d.Handoff = time.Second
	}
	if d.Poll <= 0 {
		d.Poll = 200 * time.Millisecond
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	d.targets = newTargets(d.DB)
	if d.Connect != nil {
		d.slots = &slotLocks{connect: d.Connect}
	}
	d.lanes = map[uuid.UUID]*lane{}
	d.out = make(chan result, 8192)
	d.rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	d.kick = make(chan struct{}, 1)
	d.retryKick = make(chan struct{}, 1)
	d.workers.tasks = make(chan func())
	d.ready = make(chan struct{})
}

// Ready is closed once the deliverer has read its endpoints and may be
// given notifications.
func (d *Deliverer) Ready() <-chan struct{} {
	d.defaults()
	return d.ready
}

// Run delivers until ctx ends: it reads the endpoints, keeps their slots,
// records results, claims retries, and lets old rows go. At the end,
// what waits on the fast path is handed to the retry path, the attempts
// under way finish (the client's timeout bounds them) and every result is
// recorded before it returns.
func (d *Deliverer) Run(ctx context.Context) error {
	d.defaults()
	for {
		err := d.targets.refresh(ctx)
		if err == nil {
			break
		}
		d.Log.Warn("webhooks: read endpoints (retrying)", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	close(d.ready)
	recorded := make(chan struct{})
	go func() { d.recorder(); close(recorded) }()
	var wg sync.WaitGroup
	for _, loop := range []func(context.Context){d.refresher, d.keeper, d.retries, d.janitor, d.announcer} {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	<-ctx.Done()
	wg.Wait()
	d.stopped.Store(true)
	d.handOffAll()
	d.running.Wait()
	close(d.out)
	<-recorded
	if d.slots != nil {
		d.slots.close()
	}
	return nil
}

// Submit fans note out to its tenant's endpoints and attempts it; done is
// called once its every delivery is recorded (at once when it has none).
// It must be called after Ready and before Run ends.
func (d *Deliverer) Submit(n notification.Note, done func()) {
	d.SubmitKnown(n, done, nil)
}

// SubmitKnown is Submit for a notification whose deliveries to the
// endpoints in recorded exist already (Recorded): those are not attempted
// again (a notification read again after a restart or a rebalance, or
// after its offsets were lost).
func (d *Deliverer) SubmitKnown(n notification.Note, done func(), recorded map[uuid.UUID]bool) {
	if err := d.targets.upTo(context.Background(), n.Time); err != nil {
		d.Log.Warn("webhooks: read endpoints for an event newer than the cache", "err", err)
	}
	targets := d.targets.of(n.Tenant, n.Type)
	if len(recorded) > 0 {
		targets = slices.DeleteFunc(slices.Clone(targets), func(t *target) bool { return recorded[t.ID] })
	}
	if len(targets) == 0 || n.Tenant == "" {
		done()
		return
	}
	m := &message{id: n.ID, typ: n.Type, tenant: n.Tenant, body: notification.Body(n.Type, n.Time, n.Data), noted: n.Time, done: done}
	if p, err := uuid.ParseBytes(n.Key); err == nil && strings.HasPrefix(n.Type, notification.TypePrefix) {
		m.payment = &p
	}
	m.pending.Store(int32(len(targets)))
	now := d.Now()
	for _, t := range targets {
		j := &job{m: m, t: t, queued: now}
		if !t.Enabled {
			// Kept as undelivered: a recover since then brings it back
			// (review item 4: these were lost for good).
			msg := "the endpoint was disabled when the event came"
			d.out <- result{j: j, state: Undelivered, next: now, err: &msg}
			continue
		}
		d.enqueue(j)
	}
}

// Recorded says which of the notifications ids already have deliveries,
// and to which endpoints: one probe of the (msg_id, endpoint_id) key
// each.
func (d *Deliverer) Recorded(ctx context.Context, ids []string) (map[string]map[uuid.UUID]bool, error) {
	rows, err := deliverydb.New(d.DB).Recorded(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("deliveries recorded: %w", err)
	}
	out := map[string]map[uuid.UUID]bool{}
	for _, r := range rows {
		if out[r.MsgID] == nil {
			out[r.MsgID] = map[uuid.UUID]bool{}
		}
		out[r.MsgID][r.EndpointID] = true
	}
	return out, nil
}

func (d *Deliverer) lane(id uuid.UUID) *lane {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.lanes[id]
	if l == nil {
		l = &lane{id: id, gen: -1, filled: d.Now()}
		d.lanes[id] = l
	}
	return l
}

// enqueue puts j on its endpoint's lane and starts what may start.
func (d *Deliverer) enqueue(j *job) {
	l := d.lane(j.t.ID)
	l.mu.Lock()
	l.queue = append(l.queue, j)
	l.busyAt = d.Now()
	need := d.slots != nil && len(l.slots) < min(j.t.MaxInflight, l.active+len(l.queue))
	l.mu.Unlock()
	if need {
		d.wake()
	}
	d.start(l)
}

func (d *Deliverer) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// capacity is how many attempts l may have at once: its slots, or its
// endpoint's max_inflight when this process counts alone.
func (d *Deliverer) capacity(l *lane, t *target) int {
	if d.slots == nil {
		return t.MaxInflight
	}
	return min(len(l.slots), t.MaxInflight)
}

// take spends one of l's rate tokens if there is one; otherwise it says
// when there will be.
func (l *lane) take(t *target, now time.Time) (bool, time.Duration) {
	if t.PerSecond <= 0 {
		return true, 0
	}
	burst := max(1, t.PerSecond/10)
	l.tokens = min(burst, l.tokens+now.Sub(l.filled).Seconds()*t.PerSecond)
	l.filled = now
	if l.tokens >= 1 {
		l.tokens--
		return true, 0
	}
	return false, time.Duration((1 - l.tokens) / t.PerSecond * float64(time.Second))
}

// start begins the attempts l has room, slots and rate for.
func (d *Deliverer) start(l *lane) {
	var go_ []*job
	l.mu.Lock()
	now := d.Now()
	for len(l.queue) > 0 {
		j := l.queue[0]
		t := d.targets.get(l.id)
		if t == nil {
			t = j.t
		}
		if l.active >= d.capacity(l, t) {
			break
		}
		ok, wait := l.take(t, now)
		if !ok {
			if l.timer == nil {
				l.timer = time.AfterFunc(wait, func() {
					l.mu.Lock()
					l.timer = nil
					l.mu.Unlock()
					d.start(l)
				})
			}
			break
		}
		l.queue = l.queue[1:]
		l.active++
		j.t = t
		if j.id == 0 {
			j.started = now
			if l.running == nil {
				l.running = map[*job]struct{}{}
			}
			l.running[j] = struct{}{}
		}
		go_ = append(go_, j)
	}
	l.mu.Unlock()
	for _, j := range go_ {
		d.running.Add(1)
		d.workers.run(func() {
			defer d.running.Done()
			d.attempt(j, l)
			l.mu.Lock()
			delete(l.running, j)
			l.active--
			l.busyAt = d.Now()
			retries := !l.retryDue.IsZero() && !l.retryDue.After(l.busyAt)
			l.mu.Unlock()
			d.start(l)
			if retries {
				select {
				case d.retryKick <- struct{}{}:
				default:
				}
			}
		})
	}
}

// workers run attempts on goroutines that live on between them: an
// attempt's goroutine grows its stack through the HTTP client's calls, and
// a new goroutine for each attempt grew it again every time (8% of the
// dispatcher's CPU in a profile). A task goes to an idle worker if one is
// waiting, else to a new one; a worker idle for workerIdle ends.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only to a waiting worker
}

// workerIdle is how long a worker waits for another task.
const workerIdle = 10 * time.Second

func (w *workers) run(f func()) {
	select {
	case w.tasks <- f:
	default:
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		f()
		t.Reset(workerIdle)
		select {
		case f = <-w.tasks:
		case <-t.C:
			return
		}
	}
}

// hold records the fast-path attempts of l under way for longer than
// Handoff as WAITING, leased until the attempt's timeout: its
// notification is then done and its offset may commit, however long the
// endpoint takes to answer (an attempt that hung held every later offset
// of its partition, and the fetch stopped behind them). The attempt's
// result, when it comes, updates the row; if the process dies first, the
// lease runs out and the retry path sends it again, the same webhook-id.
func (d *Deliverer) hold(l *lane) {
	now := d.Now()
	var out []*job
	l.mu.Lock()
	for j := range l.running {
		if now.Sub(j.started) >= d.Handoff && j.phase.CompareAndSwap(running, held) {
			out = append(out, j)
		}
	}
	l.mu.Unlock()
	if len(out) > 0 && d.OnHandOff != nil {
		d.OnHandOff(0, len(out))
	}
	for _, j := range out {
		until := j.started.Add(d.clientTimeout() + 5*time.Second)
		msg := "under way since " + j.started.UTC().Format(time.RFC3339Nano)
		d.out <- result{j: j, state: Waiting, next: until, lease: &until, err: &msg}
	}
}

// handOff records the jobs that waited past Handoff (all of them when
// all is set) as WAITING for the retry path: the fast path's waits are
// bounded, and a Kafka offset is never held behind a slow endpoint.
func (d *Deliverer) handOff(l *lane, all bool) {
	now := d.Now()
	var out []*job
	l.mu.Lock()
	keep := l.queue[:0]
	for _, j := range l.queue {
		switch {
		case j.id != 0 && (all || now.After(j.leased)):
			// A claimed retry not started: its lease returns it.
		case j.id != 0:
			keep = append(keep, j)
		case all || now.Sub(j.queued) >= d.Handoff:
			out = append(out, j)
		default:
			keep = append(keep, j)
		}
	}
	clear(l.queue[len(keep):])
	l.queue = keep
	if len(out) > 0 {
		l.retryDue = now
	}
	l.mu.Unlock()
	if len(out) > 0 && d.OnHandOff != nil {
		d.OnHandOff(len(out), 0)
	}
	for _, j := range out {
		msg := "waited " + now.Sub(j.queued).Round(time.Millisecond).String() + " for the endpoint's room or rate: left to the retries"
		d.out <- result{j: j, state: Waiting, next: now, err: &msg}
	}
}

func (d *Deliverer) handOffAll() {
	d.mu.Lock()
	lanes := make([]*lane, 0, len(d.lanes))
	for _, l := range d.lanes {
		lanes = append(lanes, l)
	}
	d.mu.Unlock()
	for _, l := range lanes {
		d.handOff(l, true)
	}
}

// attempt makes j's attempt and hands its result to the recorder.
func (d *Deliverer) attempt(j *job, l *lane) {
	ctx := context.Background()
	at := d.Now()
	status, retryAfter, resp, aerr := d.post(ctx, j, at)
	took := d.Now().Sub(at)
	class := Classify(status)
	if dialRefused(aerr) {
		class = Blocked
	}
	n := max(j.attempt, 1)
	r := result{j: j, state: Waiting, next: at, at: &at, latencyMS: int32(min(took.Milliseconds(), 1<<30)), resp: resp}
	if aerr != nil {
		r.err = clean(aerr.Error())
	}
	if status != 0 {
		v := int32(status)
		r.status = &v
	}
	switch class {
	case Delivered:
		r.state = DeliveredState
	case Gone:
		r.state = Undelivered
	default:
		if n >= d.Schedule.Attempts() {
			r.state = Undelivered
		} else {
			d.rngMu.Lock()
			r.next = at.Add(d.Schedule.Backoff(n, retryAfter, d.rng))
			d.rngMu.Unlock()
		}
	}
	if class != Delivered && r.err == nil {
		r.err = clean("HTTP " + strconv.Itoa(status))
	}
	if j.id == 0 && !j.phase.CompareAndSwap(running, finished) {
		r.late = true // held meanwhile: its row is there
	}
	if d.OnAttempt != nil {
		d.OnAttempt(class, took, d.Now().Sub(j.m.noted))
	}
	d.clock(ctx, j, l, class, at)
	d.out <- r
}

// clock keeps the endpoint's failure clock: a 410 disables at once; the
// first failure since a success starts the clock, and failing for
// DisableAfter disables; a success stops it (a statement only when it
// ran). The endpoint is written before the delivery is recorded, so a
// crash between leaves the delivery to be attempted (and the endpoint
// disabled) again, never an endpoint that said 410 still enabled with its
// delivery closed.
func (d *Deliverer) clock(ctx context.Context, j *job, l *lane, class Class, at time.Time) {
	t := d.targets.get(j.t.ID)
	if t == nil {
		t = j.t
	}
	l.mu.Lock()
	since := t.FailingSince
	if l.failingAt.After(t.Read) {
		since = l.failingSince
	}
	l.mu.Unlock()
	switch {
	case class == Gone:
		d.disable(ctx, j.t, "the endpoint answered 410 Gone", at)
	case class == Delivered:
		// A running clock is stopped once it has run a minute: an
		// endpoint failing every other attempt does not write its
		// endpoint row at every attempt, and a 5-day clock is a minute
		// late at most.
		if since == nil || at.Sub(*since) < healAfter {
			return
		}
		if err := deliverydb.New(d.DB).Healed(ctx, j.t.ID); err != nil {
			d.Log.Warn("webhooks: endpoint healed", "endpoint", j.t.ID, "err", err)
			return
		}
		l.mu.Lock()
		l.failingSince, l.failingAt = nil, time.Now()
		l.mu.Unlock()
	default:
		if since == nil {
			s, err := deliverydb.New(d.DB).StartFailing(ctx, deliverydb.StartFailingParams{ID: j.t.ID, At: at})
			if err != nil {
				d.Log.Warn("webhooks: endpoint failing", "endpoint", j.t.ID, "err", err)
				return
			}
			since = &s
			l.mu.Lock()
			l.failingSince, l.failingAt = since, time.Now()
			l.mu.Unlock()
		}
		if at.Sub(*since) >= DisableAfter {
			d.disable(ctx, j.t, "failing since "+since.UTC().Format(time.RFC3339), *since)
		}
	}
}

// healAfter is how long the failure clock runs before a success stops
// it.
const healAfter = time.Minute

// disable disables t once (deliverydb's Disable: only the statement that
// finds it enabled marks it to be announced); the announcer tells of it.
func (d *Deliverer) disable(ctx context.Context, t *target, reason string, since time.Time) {
	n, err := deliverydb.New(d.DB).Disable(ctx, deliverydb.DisableParams{ID: t.ID, Reason: reason})
	if err != nil {
		d.Log.Warn("webhooks: disable endpoint", "endpoint", t.ID, "err", err)
		return
	}
	if n == 1 {
		d.Log.Warn("webhooks: endpoint disabled", "endpoint", t.ID, "tenant", t.Tenant, "reason", reason, "failing_since", since)
	}
}

// clean makes s storable as Postgres text: no NUL (text refuses 0x00,
// and with it the whole batch of results: review item 2), valid UTF-8.
func clean(s string) *string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	return &s
}

// post sends j signed at `at`: the status (0: no response), a Retry-After,
// and the response's first ResponseCap bytes.
func (d *Deliverer) post(ctx context.Context, j *job, at time.Time) (int, time.Duration, *string, error) {
	sig, err := Sign(j.t.signing(at), j.m.id, at.Unix(), j.m.body)
	if err != nil {
		return 0, 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.t.URL, bytes.NewReader(j.m.body))
	if err != nil {
		return 0, 0, nil, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paysched-webhooks/1")
	req.Header.Set(HeaderID, j.m.id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	res, err := d.Client.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, ResponseCap))
	// The rest is drained a little so the connection may be reused.
	_, _ = io.CopyN(io.Discard, res.Body, 64<<10)
	var ra time.Duration
	if Classify(res.StatusCode) == Throttled {
		ra = RetryAfter(res.Header.Get("Retry-After"), at)
	}
	var resp *string
	if len(b) > 0 {
		resp = clean(string(b))
	}
	return res.StatusCode, ra, resp, nil
}

// recordBatch bounds the results one statement records: a recorder that
// falls behind catches up in larger statements.
const recordBatch = 4096

// recorder writes results in batches (whatever came while the last batch
// was written, up to recordBatch) until d.out closes, then reports each
// fast-path message whose every endpoint is recorded.
func (d *Deliverer) recorder() {
	batch := make([]result, 0, recordBatch)
	for r := range d.out {
		batch = append(batch[:0], r)
	more:
		for len(batch) < recordBatch {
			select {
			case r, ok := <-d.out:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		d.record(batch)
		for _, r := range batch {
			if r.j.id == 0 && !r.late && r.j.m.pending.Add(-1) == 0 {
				r.j.m.done()
			}
			if r.state == Waiting && r.next.Before(d.Now().Add(time.Hour)) {
				l := d.lane(r.j.t.ID)
				l.mu.Lock()
				if l.retryDue.IsZero() || r.next.Before(l.retryDue) {
					l.retryDue = r.next
				}
				l.mu.Unlock()
			}
		}
	}
}

// record writes a batch; when the batch fails, each result is written
// alone, so one bad result never fails another's record (review item 2).
// A result that still fails is written without its texts; one that fails
// then too is logged and, on the fast path, left out: its notification is
// read again after a restart, the same webhook-id.
func (d *Deliverer) record(rs []result) {
	ctx := context.Background()
	err := d.write(ctx, rs)
	// The database away (a restart, a failover): wait for it, never
	// report a notification done whose deliveries are not recorded (its
	// offset would commit, and a failed one's retry be lost). The results
	// wait meanwhile, and so, behind them, the attempts and the fetch.
	for wait := 100 * time.Millisecond; err != nil && store.Transient(err); wait = min(2*wait, 5*time.Second) {
		d.Log.Warn("webhooks: record results (the database is away; trying again)", "results", len(rs), "err", err, "in", wait)
		time.Sleep(wait)
		err = d.write(ctx, rs)
	}
	if err == nil {
		return
	}
	if len(rs) > 1 {
		d.Log.Warn("webhooks: record results (writing each alone)", "results", len(rs), "err", err)
	}
	for _, r := range rs {
		if err := d.write(ctx, []result{r}); err == nil {
			continue
		}
		bare := r
		bare.err, bare.resp = clean("the attempt's texts could not be stored"), nil
		if err := d.write(ctx, []result{bare}); err != nil {
			d.Log.Error("webhooks: record a result", "msg", r.j.m.id, "endpoint", r.j.t.ID, "err", err)
		}
	}
}

func (d *Deliverer) write(ctx context.Context, rs []result) error {
	// Typed columns: pgx encodes these without reflection or
	// driver.Valuer (a uuid.UUID is a Valuer, sent as text and parsed
	// again), which cost the recorder most of its CPU.
	var (
		mIDs, mTypes, mTenants []string
		mPays                  pgtype.FlatArray[pgtype.UUID]
		mBodies                [][]byte
		mNoted                 []time.Time
		seen                   = map[string]bool{}
		fEps                   [][16]byte
		fMsgs, fStates         []string
		fNoted, fNext          []time.Time
		fAt, fLease            pgtype.FlatArray[pgtype.Timestamptz]
		fAttempts              []int32
		fStatus, fLat          pgtype.FlatArray[pgtype.Int4]
		fErr, fResp            pgtype.FlatArray[pgtype.Text]
		lEps                   [][16]byte
		lMsgs, lStates         []string
		lNext                  []time.Time
		lAt                    pgtype.FlatArray[pgtype.Timestamptz]
		lStatus                pgtype.FlatArray[pgtype.Int4]
		lLat                   []int32
		lErr, lResp            pgtype.FlatArray[pgtype.Text]
		uIDs                   []int64
		uAttempts, uLat        []int32
		uStatus                pgtype.FlatArray[pgtype.Int4]
		uStates                []string
		uNext                  []time.Time
		uAt                    pgtype.FlatArray[pgtype.Timestamptz]
		uErr, uResp            pgtype.FlatArray[pgtype.Text]
	)
	for _, r := range rs {
		if r.j.id != 0 {
			uIDs, uAttempts, uStates, uNext, uAt = append(uIDs, r.j.id), append(uAttempts, int32(r.j.attempt)), append(uStates, r.state), append(uNext, r.next), append(uAt, pgTime(r.at))
			uStatus, uLat, uErr, uResp = append(uStatus, pgInt(r.status)), append(uLat, r.latencyMS), append(uErr, pgText(r.err)), append(uResp, pgText(r.resp))
			continue
		}
		m := r.j.m
		if r.late {
			lEps, lMsgs, lStates, lNext, lAt = append(lEps, r.j.t.ID), append(lMsgs, m.id), append(lStates, r.state), append(lNext, r.next), append(lAt, pgTime(r.at))
			lStatus, lLat, lErr, lResp = append(lStatus, pgInt(r.status)), append(lLat, r.latencyMS), append(lErr, pgText(r.err)), append(lResp, pgText(r.resp))
			continue
		}
		if !seen[m.id] {
			seen[m.id] = true
			pay := pgtype.UUID{}
			if m.payment != nil {
				pay = pgtype.UUID{Bytes: *m.payment, Valid: true}
			}
			mIDs, mTypes, mTenants, mPays, mBodies, mNoted = append(mIDs, m.id), append(mTypes, m.typ), append(mTenants, m.tenant),
				append(mPays, pay), append(mBodies, m.body), append(mNoted, m.noted)
		}
		var attempts int32
		lat := pgtype.Int4{}
		if r.at != nil {
			attempts, lat = 1, pgtype.Int4{Int32: r.latencyMS, Valid: true}
		}
		if r.lease != nil {
			attempts = 1 // held: its attempt is under way
		}
		fEps, fMsgs, fNoted, fStates, fNext = append(fEps, r.j.t.ID), append(fMsgs, m.id), append(fNoted, m.noted), append(fStates, r.state), append(fNext, r.next)
		fAttempts, fAt, fStatus, fLat, fErr, fResp = append(fAttempts, attempts), append(fAt, pgTime(r.at)), append(fStatus, pgInt(r.status)), append(fLat, lat), append(fErr, pgText(r.err)), append(fResp, pgText(r.resp))
		fLease = append(fLease, pgTime(r.lease))
	}
	b := &pgx.Batch{}
	if len(fEps) > 0 {
		b.Queue(insertSQL, mIDs, mTypes, mTenants, mPays, mBodies, mNoted, fEps, fMsgs, fNoted, fStates, fAttempts, fNext, fLease, fAt,
			fStatus, fLat, fErr, fResp)
	}
	if len(lEps) > 0 {
		b.Queue(lateSQL, lEps, lMsgs, lStates, lNext, lAt, lStatus, lLat, lErr, lResp)
	}
	if len(uIDs) > 0 {
		b.Queue(updateSQL, uIDs, uAttempts, uStates, uNext, uAt, uStatus, uLat, uErr, uResp)
	}
	if b.Len() == 0 {
		return nil
	}
	// A batch is one implicit transaction (one Sync after its
	// statements): the late results' updates follow their holds' inserts.
	return d.DB.SendBatch(ctx, b).Close()
}

// pgTime, pgInt and pgText are a nullable value as its typed column's
// element.
func pgTime(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}

func pgInt(v *int32) pgtype.Int4 {
	if v == nil {
		return pgtype.Int4{}
	}
	return pgtype.Int4{Int32: *v, Valid: true}
}

func pgText(s *string) pgtype.Text {
	if s == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: *s, Valid: true}
}

// refresher reads the endpoints' changes every refreshEvery.
func (d *Deliverer) refresher(ctx context.Context) {
	periodic.Run(ctx, refreshEvery, func(ctx context.Context) {
		if err := d.targets.refresh(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("webhooks: read endpoints", "err", err)
		}
	})
}

// keeperEvery is how often the lanes are looked after: slots taken and
// given back, waits past Handoff handed off.
const keeperEvery = 50 * time.Millisecond

// slotIdle is how long a lane keeps slots it does not use.
const slotIdle = 2 * time.Second

// keeper looks after the lanes: it hands off what waited past Handoff,
// takes slots for lanes that need more, and gives back idle ones.
func (d *Deliverer) keeper(ctx context.Context) {
	periodic.RunWoken(ctx, keeperEvery, d.kick, d.keep)
}

func (d *Deliverer) keep(ctx context.Context) {
	d.mu.Lock()
	lanes := make([]*lane, 0, len(d.lanes))
	for _, l := range d.lanes {
		lanes = append(lanes, l)
	}
	d.mu.Unlock()
	now := d.Now()
	gen := -1
	if d.slots != nil {
		gen = d.slots.current()
	}
	var wants []want
	for _, l := range lanes {
		d.handOff(l, false)
		d.hold(l)
		if d.slots == nil {
			continue
		}
		t := d.targets.get(l.id)
		l.mu.Lock()
		if l.gen != gen {
			// The session that held them is gone, and its locks with it.
			l.slots, l.gen = nil, gen
		}
		var giveBack []int
		switch {
		case t == nil || !t.Enabled:
			giveBack = l.slots[max(l.active, 0):]
		case len(l.slots) > t.MaxInflight && len(l.slots) > l.active:
			giveBack = l.slots[max(l.active, t.MaxInflight):]
		case len(l.queue) == 0 && l.active < len(l.slots) && now.Sub(l.busyAt) >= slotIdle:
			giveBack = l.slots[l.active:]
		}
		if len(giveBack) > 0 {
			giveBack = slices.Clone(giveBack)
			l.slots = l.slots[:len(l.slots)-len(giveBack)]
		}
		var w want
		if t != nil && t.Enabled {
			if need := min(t.MaxInflight, l.active+len(l.queue)) - len(l.slots); need > 0 {
				w = want{id: l.id, max: t.MaxInflight, n: need}
				for _, s := range l.slots {
					w.held |= 1 << uint(s)
				}
			}
		}
		lgen := l.gen
		l.mu.Unlock()
		if len(giveBack) > 0 {
			if err := d.slots.release(ctx, l.id, giveBack, lgen); err != nil {
				d.Log.Warn("webhooks: give back slots", "err", err)
			}
		}
		if w.n > 0 {
			wants = append(wants, w)
		}
	}
	if len(wants) == 0 {
		return
	}
	got, g, err := d.slots.acquire(ctx, wants)
	if err != nil {
		if ctx.Err() == nil {
			d.Log.Warn("webhooks: take slots", "err", err)
		}
		return
	}
	for id, ss := range got {
		l := d.lane(id)
		l.mu.Lock()
		if l.gen != g {
			l.slots, l.gen = nil, g
		}
		l.slots = append(l.slots, ss...)
		l.mu.Unlock()
		d.start(l)
	}
}

// dueEvery is how often the retry path asks every enabled endpoint when
// its next retry is due (it learns of its own hand-offs at once).
const dueEvery = 5 * time.Second

// retries is the retry path: every Poll it claims due retries for the
// lanes that have them and room for them.
func (d *Deliverer) retries(ctx context.Context) {
	t := time.NewTicker(d.Poll)
	defer t.Stop()
	var probed time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.retryKick:
			// Room again on a lane with due retries: claim now, a few
			// milliseconds after the last, not a Poll later.
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		now := d.Now()
		if now.Sub(probed) >= dueEvery {
			probed = now
			if err := d.probeDue(ctx); err != nil && ctx.Err() == nil {
				d.Log.Warn("webhooks: when are retries due", "err", err)
			}
		}
		if err := d.claim(ctx, now); err != nil && ctx.Err() == nil {
			d.Log.Warn("webhooks: claim retries", "err", err)
		}
	}
}

func (d *Deliverer) probeDue(ctx context.Context) error {
	ts := d.targets.enabled()
	if len(ts) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(ts))
	for i, t := range ts {
		ids[i] = t.ID
	}
	rows, err := deliverydb.New(d.DB).NextRetries(ctx, ids)
	if err != nil {
		return err
	}
	for _, r := range rows {
		l := d.lane(r.EndpointID)
		l.mu.Lock()
		l.retryDue = r.NextAt
		l.mu.Unlock()
	}
	return nil
}

// claim claims the due retries of the lanes with room: room is what the
// lane may start now (capacity, less what is under way and waiting), and
// for a lane without slots yet, one, so that it asks for slots.
func (d *Deliverer) claim(ctx context.Context, now time.Time) error {
	d.mu.Lock()
	lanes := make([]*lane, 0, len(d.lanes))
	for _, l := range d.lanes {
		lanes = append(lanes, l)
	}
	d.mu.Unlock()
	var ids []uuid.UUID
	var rooms []int32
	for _, l := range lanes {
		t := d.targets.get(l.id)
		if t == nil || !t.Enabled {
			continue
		}
		l.mu.Lock()
		due := !l.retryDue.IsZero() && !l.retryDue.After(now)
		room := d.capacity(l, t) - l.active - len(l.queue)
		if d.slots != nil && len(l.slots) < t.MaxInflight && len(l.queue) == 0 {
			room = max(room, 1)
		}
		if t.PerSecond > 0 {
			room = min(room, int(max(1, t.PerSecond)))
		}
		l.mu.Unlock()
		if due && room > 0 {
			ids, rooms = append(ids, l.id), append(rooms, int32(room))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := deliverydb.New(d.DB).ClaimRetries(ctx, deliverydb.ClaimRetriesParams{EndpointIds: ids, Rooms: rooms, Lease: d.Lease})
	if err != nil {
		return err
	}
	got := map[uuid.UUID]int{}
	var jobs []*job
	for _, r := range rows {
		m := &message{id: r.MsgID, typ: r.EventType, tenant: r.Tenant, payment: r.PaymentID, body: r.Body, noted: r.NotedAt}
		j := &job{m: m, id: r.ID, attempt: int(r.Attempts), queued: now, leased: now.Add(d.Lease - d.clientTimeout())}
		if j.t = d.targets.get(r.EndpointID); j.t == nil {
			continue
		}
		got[r.EndpointID]++
		jobs = append(jobs, j)
	}
	for i, id := range ids {
		l := d.lane(id)
		l.mu.Lock()
		if got[id] < int(rooms[i]) {
			// Nothing more due now: the next is known at the next probe,
			// or when a result of this process is recorded.
			l.retryDue = now.Add(dueEvery)
		}
		l.mu.Unlock()
	}
	for _, j := range jobs {
		d.enqueue(j)
	}
	return nil
}

func (d *Deliverer) clientTimeout() time.Duration {
	if d.Client != nil && d.Client.Timeout > 0 {
		return d.Client.Timeout
	}
	return 15 * time.Second
}

// janitorEvery is how often finished rows past retention are let go.
const janitorEvery = time.Minute

// janitor deletes, past Retention, finished deliveries (their attempts
// with them) and the messages no delivery needs any more, a bounded batch
// at a time (review item 6: the tables grew without bound).
func (d *Deliverer) janitor(ctx context.Context) {
	if d.Retention <= 0 {
		return
	}
	periodic.RunAtOnce(ctx, janitorEvery, func(ctx context.Context) {
		if _, err := Sweep(ctx, d.DB, d.Now().Add(-d.Retention), 5000); err != nil && ctx.Err() == nil {
			d.Log.Warn("webhooks: retention", "err", err)
		}
	})
}

// Sweep deletes finished deliveries done before cutoff and the messages
// noted before it that no delivery refers to, up to batch of each per
// statement, until none is left; it returns how many deliveries it
// deleted. WAITING deliveries, and their messages, are kept whatever
// their age.
func Sweep(ctx context.Context, db pgdb.DB, cutoff time.Time, batch int) (int64, error) {
	q := deliverydb.New(db)
	var total int64
	for {
		// By the notification's age (the block range index), then what
		// is done: a delivery is done after its notification.
		n, err := q.SweepDeliveries(ctx, deliverydb.SweepDeliveriesParams{Cutoff: cutoff, Batch: int32(batch)})
		if err != nil {
			return total, fmt.Errorf("delete old deliveries: %w", err)
		}
		total += n
		if n < int64(batch) {
			break
		}
	}
	for {
		n, err := q.SweepMessages(ctx, deliverydb.SweepMessagesParams{Cutoff: cutoff, Batch: int32(batch)})
		if err != nil {
			return total, fmt.Errorf("delete old messages: %w", err)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// Disabled is an endpoint disabled, for its event.
type Disabled struct {
	EndpointID   uuid.UUID
	Tenant, URL  string
	Reason       string
	FailingSince time.Time
	DisabledAt   time.Time
}

// announcer publishes each disabling once: it locks the rows to announce,
// produces their events, and marks them announced in the same
// transaction. A crash after the produce, before the commit, announces
// again under the same event id (made of the endpoint and when it was
// disabled): a duplicate the receivers drop, never a second event.
func (d *Deliverer) announcer(ctx context.Context) {
	if d.OnDisabled == nil {
		return
	}
	periodic.Run(ctx, time.Second, func(ctx context.Context) {
		if err := d.announce(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("webhooks: announce disabled endpoints", "err", err)
		}
	})
}

func (d *Deliverer) announce(ctx context.Context) error {
	return pgx.BeginFunc(ctx, d.DB, func(tx pgx.Tx) error {
		q := deliverydb.New(tx)
		rows, err := q.TakeAnnouncements(ctx)
		if err != nil || len(rows) == 0 {
			return err
		}
		ids := make([]uuid.UUID, 0, len(rows))
		for _, r := range rows {
			x := Disabled{EndpointID: r.ID, Tenant: r.Tenant, URL: r.Url, Reason: r.Reason, FailingSince: r.FailingSince, DisabledAt: r.DisabledAt}
			if err := d.OnDisabled(ctx, x); err != nil {
				return fmt.Errorf("announce %s: %w", x.EndpointID, err)
			}
			ids = append(ids, x.EndpointID)
		}
		return q.MarkAnnounced(ctx, ids)
	})
}
