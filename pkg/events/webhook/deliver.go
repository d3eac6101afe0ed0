package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/store"
)

// A delivery's states (webhook_deliveries.state).
const (
	// Waiting: to be attempted, due at next_at, or under way (leased).
	Waiting = "WAITING"
	// DeliveredState: an attempt got a 2xx.
	DeliveredState = "DELIVERED"
	// Undelivered: its attempts are spent, or its endpoint answered 410;
	// a recover makes it Waiting again.
	Undelivered = "UNDELIVERED"
)

// ResponseCap is how much of a response an attempt keeps.
const ResponseCap = 4096

// claimCap bounds the deliveries one claim looks at per endpoint: above
// any endpoint's max_inflight (64), so the cap is the endpoint's room.
const claimCap = 64

// claimSQL leases up to $1 due deliveries for $2, taking from each enabled
// endpoint only what its room allows (max_inflight less those leased now):
// a slow endpoint fills its own room and no other's, and the claim still
// reaches every endpoint behind it (work is picked per endpoint, not from
// one queue in due order, where a backlog at the head would block). The
// leased row's next_at moves to its lease's end, so a dispatcher that dies
// mid-attempt leaves it due again then (at least once). Its cost: one
// probe of the due index per enabled endpoint.
var claimSQL = `
WITH ep AS (
    SELECT e.id, e.max_inflight - (SELECT count(*) FROM webhook_deliveries x
            WHERE x.endpoint_id = e.id AND x.state = '` + Waiting + `' AND x.lease_until IS NOT NULL
              AND x.lease_until > now())::int AS room
    FROM webhook_endpoints e WHERE e.enabled),
cand AS (
    SELECT c.id, ep.room, row_number() OVER (PARTITION BY ep.id ORDER BY c.next_at, c.id) AS n
    FROM ep CROSS JOIN LATERAL (
        SELECT d.id, d.next_at FROM webhook_deliveries d
        WHERE d.endpoint_id = ep.id AND d.state = '` + Waiting + `' AND d.next_at <= now()
        ORDER BY d.next_at, d.id LIMIT ` + strconv.Itoa(claimCap) + `
        FOR UPDATE SKIP LOCKED) c
    WHERE ep.room > 0),
picked AS (SELECT id FROM cand WHERE n <= room ORDER BY n, id LIMIT $1)
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1, lease_until = now() + $2::interval, next_at = now() + $2::interval
FROM picked, webhook_endpoints e
WHERE d.id = picked.id AND e.id = d.endpoint_id
RETURNING d.id, d.endpoint_id, d.msg_id, d.event_type, d.body, d.attempts, d.noted_at, e.url, e.tenant,
          CASE WHEN e.rotate_until IS NOT NULL AND e.rotate_until < now() THEN e.secrets[1:1] ELSE e.secrets END,
          e.max_per_second, e.failing_since`

// outcomeSQL records attempts and what follows each, fenced by the
// attempt: an attempt whose lease ran out and was claimed again records
// nothing (the newer attempt owns the delivery). One statement records a
// batch (see recorder).
const outcomeSQL = `
WITH o AS (
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::timestamptz[], $5::int[], $6::text[],
                         $7::timestamptz[], $8::int[], $9::text[])
        AS o(id, attempt, state, next_at, status, error, at, latency_ms, response)),
d AS (
    UPDATE webhook_deliveries w
    SET state = o.state, next_at = o.next_at, lease_until = NULL, last_status = o.status, last_error = o.error,
        done_at = CASE WHEN o.state = '` + Waiting + `' THEN NULL ELSE now() END
    FROM o
    WHERE w.id = o.id AND w.attempts = o.attempt AND w.state = '` + Waiting + `'
    RETURNING w.id, w.attempts)
INSERT INTO webhook_attempts (delivery_id, attempt, at, status, latency_ms, error, response)
SELECT o.id, o.attempt, o.at, o.status, o.latency_ms, o.error, o.response FROM o JOIN d ON d.id = o.id AND d.attempts = o.attempt
ON CONFLICT DO NOTHING`

// outcome is an attempt to record.
type outcome struct {
	id        int64
	attempt   int32
	state     string
	next, at  time.Time
	status    *int32
	err, resp *string
	latencyMS int32
}

// recordBatch bounds the attempts one statement records.
const recordBatch = 512

// failingSQL notes an endpoint's failure: the first since its last
// success starts the clock that disables it.
const failingSQL = `
UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, $2)
WHERE id = $1 RETURNING failing_since`

// healedSQL: a success stops the clock (written only when it ran).
const healedSQL = `UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL`

// disableSQL disables an endpoint once; its tenant and URL name it in the
// event.
const disableSQL = `
UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, updated_at = now()
WHERE id = $1 AND enabled RETURNING tenant, url`

// Delivery is a claimed delivery, with what its attempt needs of its
// endpoint.
type Delivery struct {
	ID         int64
	EndpointID uuid.UUID
	MsgID      string
	Type       string
	Body       []byte
	Attempt    int
	NotedAt    time.Time
	URL        string
	Tenant     string
	Secrets    []string
	PerSecond  float64
	// FailingSince: the endpoint's failure clock, when it runs (a success
	// stops it).
	FailingSince *time.Time
}

// Disabled is an endpoint just disabled, for its event.
type Disabled struct {
	EndpointID   uuid.UUID
	Tenant, URL  string
	Reason       string
	FailingSince time.Time
}

// Worker delivers the due deliveries: it claims what its free slots and
// each endpoint's room allow, and attempts each.
type Worker struct {
	DB     store.DB
	Client *http.Client
	// Slots is how many attempts run at once (default 64).
	Slots int
	// Lease is how long a claimed delivery is the worker's: above the
	// client's timeout, so an attempt never outlives its lease.
	Lease time.Duration
	// Poll is the wait after a claim that found nothing (default 50 ms).
	Poll time.Duration
	// Schedule is the retries' delays (default DefaultSchedule).
	Schedule Schedule
	// OnDisabled announces an endpoint just disabled (the
	// paysched.webhook.endpoint_disabled event). Called before the disable
	// commits: announced at least once.
	OnDisabled func(context.Context, Disabled) error
	// OnAttempt observes each attempt (metrics): its class, how long it
	// took, and, when delivered, how long after the notification.
	OnAttempt func(c Class, took, lag time.Duration)
	Log       *slog.Logger
	Now       func() time.Time

	mu    sync.Mutex
	rates map[uuid.UUID]*pacer
	rng   *rand.Rand
	// out feeds the recorder while Run runs (nil: each attempt is
	// recorded on its own).
	out chan outcome
}

func (w *Worker) defaults() {
	if w.Slots <= 0 {
		w.Slots = 64
	}
	if w.Lease <= 0 {
		w.Lease = 30 * time.Second
	}
	if w.Poll <= 0 {
		w.Poll = 50 * time.Millisecond
	}
	if len(w.Schedule) == 0 {
		w.Schedule = DefaultSchedule
	}
	if w.Now == nil {
		w.Now = time.Now
	}
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
	w.rates = map[uuid.UUID]*pacer{}
	w.rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
}

// Run delivers until ctx ends; attempts under way then finish (their
// client timeout bounds them) or are left to their lease.
func (w *Worker) Run(ctx context.Context) error {
	w.defaults()
	free := make(chan struct{}, w.Slots)
	for range w.Slots {
		free <- struct{}{}
	}
	// Attempts end into the recorder, which writes them in batches: a slot
	// is free again as soon as its answer is in, not after a commit of its
	// own. An outcome not yet written when the process dies is attempted
	// again after its lease (at least once, the same webhook-id).
	w.out = make(chan outcome, 4*w.Slots)
	// wake: the recorder wrote a batch, so slots and endpoints' room are
	// free again; the claim does not wait out its poll for them.
	wake := make(chan struct{}, 1)
	recorded := make(chan struct{})
	go func() {
		w.recorder(context.WithoutCancel(ctx), func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
		close(recorded)
	}()
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		close(w.out)
		<-recorded
	}()
	for {
		n := len(free)
		var ds []Delivery
		var err error
		if n > 0 {
			ds, err = w.Claim(ctx, n)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.Log.Warn("webhooks: claim", "err", err)
		}
		for _, d := range ds {
			<-free
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { free <- struct{}{} }()
				w.Attempt(context.WithoutCancel(ctx), d)
			}()
		}
		if len(ds) < n || n == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
			case <-time.After(w.Poll):
			}
		}
	}
}

// Claim leases up to n due deliveries.
func (w *Worker) Claim(ctx context.Context, n int) ([]Delivery, error) {
	if w.rates == nil {
		w.defaults()
	}
	rows, err := w.DB.Query(ctx, claimSQL, n, w.Lease)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		var per float32
		err := r.Scan(&d.ID, &d.EndpointID, &d.MsgID, &d.Type, &d.Body, &d.Attempt, &d.NotedAt, &d.URL, &d.Tenant, &d.Secrets, &per, &d.FailingSince)
		d.PerSecond = float64(per)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return out, nil
}

// Attempt makes one attempt of d and records it.
func (w *Worker) Attempt(ctx context.Context, d Delivery) {
	if w.rates == nil {
		w.defaults()
	}
	w.pace(ctx, d)
	at := w.Now()
	status, retryAfter, resp, aerr := w.post(ctx, d, at)
	took := w.Now().Sub(at)
	class := Classify(status)
	if dialRefused(aerr) {
		class = Blocked
	}
	state, next := Waiting, at
	var errText *string
	if aerr != nil {
		s := aerr.Error()
		errText = &s
	}
	switch class {
	case Delivered:
		state = DeliveredState
	case Gone:
		state = Undelivered
	default:
		if d.Attempt >= w.Schedule.Attempts() {
			state = Undelivered
		} else {
			w.mu.Lock()
			next = at.Add(w.Schedule.Backoff(d.Attempt, retryAfter, w.rng))
			w.mu.Unlock()
		}
	}
	if class != Delivered && errText == nil {
		s := "HTTP " + strconv.Itoa(status)
		errText = &s
	}
	var st *int
	if status != 0 {
		st = &status
	}
	if w.OnAttempt != nil {
		w.OnAttempt(class, took, w.Now().Sub(d.NotedAt))
	}
	// Endpoint first: a 410 disables before the delivery is closed, so a
	// crash between leaves the delivery to be attempted (and disabled)
	// again, never an endpoint that said 410 still enabled with its
	// delivery closed.
	switch {
	case class == Gone:
		w.disable(ctx, d, "the endpoint answered 410 Gone", at)
	case class == Delivered:
		// Only a running clock is stopped: a healthy endpoint's success
		// costs no statement here.
		if d.FailingSince == nil {
			break
		}
		if _, err := w.DB.Exec(ctx, healedSQL, d.EndpointID); err != nil {
			w.Log.Warn("webhooks: endpoint healed", "endpoint", d.EndpointID, "err", err)
		}
	default:
		// The clock is started once; while it runs, a failure only
		// compares (the claim read it).
		since := d.FailingSince
		if since == nil {
			var s time.Time
			if err := w.DB.QueryRow(ctx, failingSQL, d.EndpointID, at).Scan(&s); err != nil {
				w.Log.Warn("webhooks: endpoint failing", "endpoint", d.EndpointID, "err", err)
			} else {
				since = &s
			}
		}
		if since != nil && at.Sub(*since) >= DisableAfter {
			w.disable(ctx, d, "failing since "+since.UTC().Format(time.RFC3339), *since)
		}
	}
	o := outcome{id: d.ID, attempt: int32(d.Attempt), state: state, next: next, at: at, err: errText, resp: resp,
		latencyMS: int32(min(took.Milliseconds(), 1<<30))}
	if st != nil {
		v := int32(*st)
		o.status = &v
	}
	if w.out != nil {
		w.out <- o
		return
	}
	w.record(ctx, []outcome{o})
}

// recorder writes the outcomes from w.out in batches (whatever came while
// the last batch was written, up to recordBatch) until w.out is closed,
// calling written after each.
func (w *Worker) recorder(ctx context.Context, written func()) {
	batch := make([]outcome, 0, recordBatch)
	for o := range w.out {
		batch = append(batch[:0], o)
	more:
		for len(batch) < recordBatch {
			select {
			case o, ok := <-w.out:
				if !ok {
					break more
				}
				batch = append(batch, o)
			default:
				break more
			}
		}
		w.record(ctx, batch)
		written()
	}
}

// record writes outcomes in one statement.
func (w *Worker) record(ctx context.Context, outs []outcome) {
	n := len(outs)
	ids, attempts, states := make([]int64, n), make([]int32, n), make([]string, n)
	nexts, ats := make([]time.Time, n), make([]time.Time, n)
	statuses, lat := make([]*int32, n), make([]int32, n)
	errs, resps := make([]*string, n), make([]*string, n)
	for i, o := range outs {
		ids[i], attempts[i], states[i], nexts[i], ats[i] = o.id, o.attempt, o.state, o.next, o.at
		statuses[i], lat[i], errs[i], resps[i] = o.status, o.latencyMS, o.err, o.resp
	}
	if _, err := w.DB.Exec(ctx, outcomeSQL, ids, attempts, states, nexts, statuses, errs, ats, lat, resps); err != nil {
		// Their leases run out and they are attempted again: at least
		// once.
		w.Log.Warn("webhooks: record attempts", "attempts", n, "err", err)
	}
}

// disable disables d's endpoint, announcing it first.
func (w *Worker) disable(ctx context.Context, d Delivery, reason string, since time.Time) {
	if w.OnDisabled != nil {
		if err := w.OnDisabled(ctx, Disabled{EndpointID: d.EndpointID, Tenant: d.Tenant, URL: d.URL, Reason: reason,
			FailingSince: since}); err != nil {
			w.Log.Warn("webhooks: announce disabled endpoint (it stays enabled; the next failure tries again)",
				"endpoint", d.EndpointID, "err", err)
			return
		}
	}
	var tenant, url string
	err := w.DB.QueryRow(ctx, disableSQL, d.EndpointID, reason).Scan(&tenant, &url)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		w.Log.Warn("webhooks: disable endpoint", "endpoint", d.EndpointID, "err", err)
		return
	}
	w.Log.Warn("webhooks: endpoint disabled", "endpoint", d.EndpointID, "tenant", d.Tenant, "reason", reason)
}

// post sends d signed at `at`: the status (0: no response), a Retry-After,
// and the response's first ResponseCap bytes.
func (w *Worker) post(ctx context.Context, d Delivery, at time.Time) (int, time.Duration, *string, error) {
	sig, err := Sign(d.Secrets, d.MsgID, at.Unix(), d.Body)
	if err != nil {
		return 0, 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return 0, 0, nil, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paysched-webhooks/1")
	req.Header.Set(HeaderID, d.MsgID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	res, err := w.Client.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, ResponseCap))
	// The rest is drained a little so the connection may be reused.
	_, _ = io.CopyN(io.Discard, res.Body, 64<<10)
	s := string(bytes.ToValidUTF8(b, []byte("?")))
	var ra time.Duration
	if Classify(res.StatusCode) == Throttled {
		ra = RetryAfter(res.Header.Get("Retry-After"), at)
	}
	return res.StatusCode, ra, &s, nil
}

// pacer spaces one endpoint's attempts from this worker.
type pacer struct {
	mu   sync.Mutex
	next time.Time
}

// pace waits until d's endpoint may be sent another attempt: at most
// PerSecond a second from this worker.
func (w *Worker) pace(ctx context.Context, d Delivery) {
	if d.PerSecond <= 0 {
		return
	}
	w.mu.Lock()
	p := w.rates[d.EndpointID]
	if p == nil {
		p = &pacer{}
		w.rates[d.EndpointID] = p
	}
	w.mu.Unlock()
	gap := time.Duration(float64(time.Second) / d.PerSecond)
	p.mu.Lock()
	now := w.Now()
	at := p.next
	if at.Before(now) {
		at = now
	}
	p.next = at.Add(gap)
	p.mu.Unlock()
	if wait := at.Sub(now); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}
