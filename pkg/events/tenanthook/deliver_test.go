package tenanthook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newDB(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.NewURL(t)
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db, url
}

// endpoint registers a loopback endpoint of tenant for h.
func endpoint(t *testing.T, db pgdb.DB, tenant string, h http.Handler, maxInflight int, types ...string) (Endpoint, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e := Endpoint{Tenant: tenant, URL: srv.URL + "/hook", EventTypes: types, MaxInflight: maxInflight, MaxPerSecond: 10000}
	if err := e.Check(true); err != nil {
		t.Fatal(err)
	}
	out, secret, err := CreateEndpoint(context.Background(), db, e)
	if err != nil {
		t.Fatal(err)
	}
	return out, secret
}

// noteOf is a notification of tenant, as the audit-consumer's would be.
func noteOf(tenant, typ, id string, at time.Time) notification.Note {
	return notification.Note{ID: id, Type: typ, Tenant: tenant, Time: at, Key: []byte(uuid.NewString()),
		Data: []byte(`{"paymentId":"x","status":"COMPLETED"}`)}
}

// harness runs a Deliverer over db until the test ends.
type harness struct {
	t *testing.T
	d *Deliverer
}

func start(t *testing.T, db pgdb.DB, setup func(*Deliverer)) *harness {
	t.Helper()
	d := &Deliverer{DB: db, Client: Egress{Timeout: 5 * time.Second, Loopback: true}.Client(), Lease: 20 * time.Second,
		Poll: 20 * time.Millisecond}
	if setup != nil {
		setup(d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-d.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the deliverer never read its endpoints")
	}
	return &harness{t: t, d: d}
}

// refresh makes the deliverer read the endpoints' changes now.
func (h *harness) refresh() {
	h.t.Helper()
	if err := h.d.targets.refresh(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

// submit hands notes to the fast path and waits until each is recorded.
func (h *harness) submit(notes ...notification.Note) {
	h.t.Helper()
	var wg sync.WaitGroup
	for _, n := range notes {
		wg.Add(1)
		h.d.Submit(n, wg.Done)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		h.t.Fatal("notifications not recorded within 60 s")
	}
}

type delivery struct {
	state    string
	attempts int
	next     time.Time
	status   *int
	err      *string
}

func deliveriesOf(t *testing.T, db pgdb.DB, ep uuid.UUID) map[string]delivery {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT msg_id, state, attempts, next_at, last_status, last_error FROM webhook_deliveries WHERE endpoint_id = $1`, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]delivery{}
	for rows.Next() {
		var id string
		var d delivery
		if err := rows.Scan(&id, &d.state, &d.attempts, &d.next, &d.status, &d.err); err != nil {
			t.Fatal(err)
		}
		out[id] = d
	}
	return out
}

// waitFor polls cond every 20 ms for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s", what)
		}
	}
}

// A notification read twice makes one delivery per subscribed endpoint of
// its tenant, and the message's body once: none to an endpoint of another
// type or another tenant.
func TestFanoutOncePerSubscribedEndpoint(t *testing.T) {
	db, _ := newDB(t)
	var got sync.Map
	ok := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got.Store(r.URL.String()+r.Header.Get(HeaderID), true) })
	all, _ := endpoint(t, db, "acme", ok, 4)
	completed, _ := endpoint(t, db, "acme", ok, 4, "paysched.payment.completed")
	other, _ := endpoint(t, db, "globex", ok, 4)
	h := start(t, db, nil)
	notes := []notification.Note{noteOf("acme", "paysched.payment.completed", "m1", time.Now()),
		noteOf("acme", "paysched.payment.failed", "m2", time.Now())}
	h.submit(notes...)
	h.submit(notes...)
	for _, c := range []struct {
		ep   Endpoint
		want []string
	}{{all, []string{"m1", "m2"}}, {completed, []string{"m1"}}, {other, nil}} {
		d := deliveriesOf(t, db, c.ep.ID)
		if len(d) != len(c.want) {
			t.Errorf("endpoint %s %v: %d deliveries %v, want %v", c.ep.Tenant, c.ep.EventTypes, len(d), d, c.want)
		}
		for _, id := range c.want {
			if d[id].state != DeliveredState || d[id].attempts != 1 {
				t.Errorf("endpoint %s %v: %s: %+v", c.ep.Tenant, c.ep.EventTypes, id, d[id])
			}
		}
	}
	var messages, attempts int
	if err := db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM webhook_messages), (SELECT count(*) FROM webhook_attempts)`).Scan(&messages, &attempts); err != nil {
		t.Fatal(err)
	}
	if messages != 2 || attempts != 0 {
		t.Fatalf("%d messages (want 2: a body once per notification), %d attempt rows (want 0: the delivery row is the attempt)", messages, attempts)
	}
}

// A 410 disables the endpoint at once and closes the delivery; however
// many attempts meet the 410 together, the disabling is announced once
// (review item 10).
func TestGoneDisablesTheEndpointOnce(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	gone, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(20 * time.Millisecond) // the attempts overlap
		w.WriteHeader(http.StatusGone)
	}), 16)
	var mu sync.Mutex
	var announced []Disabled
	h := start(t, db, func(d *Deliverer) {
		d.OnDisabled = func(_ context.Context, x Disabled) error {
			mu.Lock()
			defer mu.Unlock()
			announced = append(announced, x)
			return nil
		}
	})
	var notes []notification.Note
	for i := range 16 {
		notes = append(notes, noteOf("acme", "paysched.payment.completed", fmt.Sprint("m", i), time.Now()))
	}
	h.submit(notes...)
	var enabled bool
	var reason string
	if err := db.QueryRow(ctx, `SELECT enabled, coalesce(disabled_reason, '') FROM webhook_endpoints WHERE id = $1`, gone.ID).Scan(&enabled, &reason); err != nil {
		t.Fatal(err)
	}
	if enabled || reason == "" {
		t.Fatalf("after 410: enabled %v, reason %q", enabled, reason)
	}
	if d := deliveriesOf(t, db, gone.ID)["m0"]; d.state != Undelivered || d.status == nil || *d.status != 410 {
		t.Fatalf("delivery after 410: %+v", d)
	}
	waitFor(t, "the announcement", func() bool { mu.Lock(); defer mu.Unlock(); return len(announced) > 0 })
	time.Sleep(2500 * time.Millisecond) // the announcer's next rounds find nothing more
	mu.Lock()
	defer mu.Unlock()
	if len(announced) != 1 || announced[0].EndpointID != gone.ID || announced[0].Tenant != "acme" {
		t.Fatalf("announced %d times: %+v", len(announced), announced)
	}
}

// An event for a disabled endpoint is kept, undelivered (review item 4:
// it was lost for good), and a recover since then brings it back.
func TestEventsForADisabledEndpointAreKept(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	var got atomic.Int32
	ep, _ := endpoint(t, db, "acme", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }), 4)
	if err := SetEnabled(ctx, db, "acme", ep.ID, false); err != nil {
		t.Fatal(err)
	}
	h := start(t, db, nil)
	before := time.Now().Add(-time.Minute)
	h.submit(noteOf("acme", "paysched.payment.completed", "m1", time.Now()))
	if d := deliveriesOf(t, db, ep.ID)["m1"]; d.state != Undelivered || d.attempts != 0 {
		t.Fatalf("the event for the disabled endpoint: %+v", d)
	}
	if got.Load() != 0 {
		t.Fatal("a disabled endpoint was sent the event")
	}
	if err := SetEnabled(ctx, db, "acme", ep.ID, true); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	if n, err := Recover(ctx, db, "acme", ep.ID, before, nil); err != nil || n != 1 {
		t.Fatalf("recover: %d, %v", n, err)
	}
	waitFor(t, "the recovered delivery", func() bool { return deliveriesOf(t, db, ep.ID)["m1"].state == DeliveredState })
	if got.Load() != 1 {
		t.Fatalf("received %d times", got.Load())
	}
}

// A throttled answer's Retry-After sets the next attempt when it is later
// than the schedule's; without one, the schedule's 5 s (±10%).
func TestRetryAfterIsHonoured(t *testing.T) {
	db, _ := newDB(t)
	type tc struct {
		name       string
		status     int
		retryAfter string
		min, max   time.Duration
	}
	cases := []tc{
		{"503 Retry-After 3600", 503, "3600", 59 * time.Minute, 61 * time.Minute},
		{"429 Retry-After an HTTP date", 429, "date", 9 * time.Minute, 11 * time.Minute},
		{"502, none", 502, "", 4 * time.Second, 6 * time.Second},
		{"500 Retry-After 3600 (not a throttle: ignored)", 500, "3600", 4 * time.Second, 6 * time.Second},
	}
	eps := map[string]Endpoint{}
	for _, c := range cases {
		eps[c.name], _ = endpoint(t, db, c.name, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			ra := c.retryAfter
			if ra == "date" {
				ra = time.Now().Add(10 * time.Minute).UTC().Format(http.TimeFormat)
			}
			if ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			w.WriteHeader(c.status)
		}), 4)
	}
	h := start(t, db, nil)
	for _, c := range cases {
		before := time.Now()
		h.submit(noteOf(c.name, "paysched.payment.completed", "m1", time.Now()))
		d := deliveriesOf(t, db, eps[c.name].ID)["m1"]
		if wait := d.next.Sub(before); d.state != Waiting || d.attempts != 1 || wait < c.min || wait > c.max {
			t.Errorf("%s: %+v, next attempt in %s, want %s to %s", c.name, d, wait.Round(time.Second), c.min, c.max)
		}
	}
}

// A hanging endpoint holds only its own room: another tenant's endpoint,
// whose deliveries came later, gets every one while the hanging one has
// at most its max_inflight in flight; what waited past the hand-off is
// left to the retries, so the hanging endpoint holds no notification's
// record (nor its Kafka offset) back.
func TestASlowEndpointDelaysNoOther(t *testing.T) {
	db, _ := newDB(t)
	release := make(chan struct{})
	var inflight, most atomic.Int32
	slow, _ := endpoint(t, db, "slow", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
	}), 2)
	var got sync.Map
	fast, _ := endpoint(t, db, "fast", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get(HeaderID), true)
	}), 4)
	// No attempt times out within the test: an attempt given up on while
	// its request still hangs at the server would let another in beside it.
	h := start(t, db, func(d *Deliverer) {
		d.Client = Egress{Timeout: 3 * time.Minute, Loopback: true}.Client()
		d.Lease = 4 * time.Minute
	})
	defer close(release)
	var slowNotes, fastNotes []notification.Note
	for i := range 20 {
		slowNotes = append(slowNotes, noteOf("slow", "paysched.payment.completed", fmt.Sprint("s", i), time.Now()))
		fastNotes = append(fastNotes, noteOf("fast", "paysched.payment.completed", fmt.Sprint("f", i), time.Now()))
	}
	var slowDone sync.WaitGroup
	for _, n := range slowNotes {
		slowDone.Add(1)
		h.d.Submit(n, slowDone.Done)
	}
	h.submit(fastNotes...)
	for id, d := range deliveriesOf(t, db, fast.ID) {
		if d.state != DeliveredState {
			t.Errorf("%s to the healthy endpoint: %+v", id, d)
		}
	}
	// The slow endpoint's: two hang, the rest are handed off within the
	// hand-off (1 s), and with them their notifications are done.
	waitFor(t, "the slow endpoint's notifications recorded", func() bool {
		n := 0
		for _, d := range deliveriesOf(t, db, slow.ID) {
			if d.state == Waiting && d.attempts == 0 {
				n++
			}
		}
		return n == 18
	})
	// The two hanging attempts are held (recorded, leased) within the
	// hand-off too: every slow notification is done, none holds its
	// offset behind an endpoint that does not answer.
	all := make(chan struct{})
	go func() { slowDone.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("a notification to the hanging endpoint was not done while its attempt hung")
	}
	if m := most.Load(); m > 2 {
		t.Fatalf("the slow endpoint had %d attempts in flight, above its max_inflight of 2", m)
	}
}

// A tenant's endpoint with the lowest rate the API allows (1 a second) and
// the most room (64) parks nothing: its deliveries wait for their rate
// outside any slot and are handed to the retries, and another tenant's
// deliveries, sent meanwhile, each arrive within a second (review item 1:
// every slot of every replica was parked in pace(), for everyone).
func TestASlowRateDelaysNoOther(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	slow, _ := endpoint(t, db, "slow", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), 64)
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET max_per_second = 1 WHERE id = $1`, slow.ID); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var late []time.Duration
	endpoint(t, db, "other", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if d := time.Since(sent[r.Header.Get(HeaderID)]); d > time.Second {
			late = append(late, d)
		}
	}), 4)
	h := start(t, db, nil)
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(2)
		h.d.Submit(noteOf("slow", "paysched.payment.completed", fmt.Sprint("s", i), time.Now()), wg.Done)
		id := fmt.Sprint("o", i)
		mu.Lock()
		sent[id] = time.Now()
		mu.Unlock()
		h.d.Submit(noteOf("other", "paysched.payment.completed", id, time.Now()), wg.Done)
		if i%30 == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(late) > 0 {
		t.Fatalf("%d of the other tenant's deliveries arrived more than a second after they were sent (up to %s)", len(late), slices_max(late))
	}
	waiting := 0
	for _, d := range deliveriesOf(t, db, slow.ID) {
		if d.state == Waiting {
			waiting++
		}
	}
	if waiting < 250 {
		t.Fatalf("the slow endpoint has %d deliveries left to the retries, want most of its 300", waiting)
	}
}

func slices_max(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// A reply with a NUL byte (which no Postgres text holds) is recorded,
// cleaned, and so are the results written beside it (review item 2: one
// statement failed for all of them, and they were sent again forever).
func TestANULReplyIsRecordedWithItsNeighbours(t *testing.T) {
	db, _ := newDB(t)
	nul, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(500)
		_, _ = w.Write([]byte("bad\x00reply\xff"))
	}), 4)
	fine, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}), 4)
	h := start(t, db, nil)
	var notes []notification.Note
	for i := range 20 {
		notes = append(notes, noteOf("acme", "paysched.payment.completed", fmt.Sprint("m", i), time.Now()))
	}
	h.submit(notes...)
	for id, d := range deliveriesOf(t, db, nul.ID) {
		if d.state != Waiting || d.status == nil || *d.status != 500 {
			t.Errorf("%s to the NUL endpoint: %+v", id, d)
		}
	}
	if n := len(deliveriesOf(t, db, fine.ID)); n != 20 {
		t.Fatalf("%d of 20 recorded for the endpoint beside it", n)
	}
	var resp string
	if err := db.QueryRow(context.Background(), `SELECT last_response FROM webhook_deliveries WHERE endpoint_id = $1 LIMIT 1`, nul.ID).Scan(&resp); err != nil {
		t.Fatal(err)
	}
	if resp != "bad\uFFFDreply\uFFFD" {
		t.Fatalf("response stored as %q", resp)
	}
}

// Two dispatchers, each its own session, share an endpoint's
// max_inflight: together they never have more attempts at it at once
// (review item 7: each counted its own, and two reached twice the cap).
func TestInflightBoundHoldsAcrossDispatchers(t *testing.T) {
	db, url := newDB(t)
	var inflight, most atomic.Int32
	var got atomic.Int32
	endpoint(t, db, "acme", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(30 * time.Millisecond)
		got.Add(1)
	}), 3)
	connect := func(d *Deliverer) {
		d.Connect = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
		d.Handoff = time.Minute // the fast path waits for its slots here
	}
	a, b := start(t, db, connect), start(t, db, connect)
	var wg sync.WaitGroup
	for i := range 60 {
		for _, h := range []*harness{a, b} {
			wg.Add(1)
			h.d.Submit(noteOf("acme", "paysched.payment.completed", fmt.Sprintf("m%d-%p", i, h), time.Now()), wg.Done)
		}
	}
	wg.Wait()
	if got.Load() != 120 {
		t.Fatalf("%d of 120 delivered", got.Load())
	}
	if m := most.Load(); m > 3 {
		t.Fatalf("two dispatchers had %d attempts in flight at once, above the endpoint's max_inflight of 3", m)
	}
}

// During a rotation each delivery carries both signatures, so a receiver
// still on the old secret and one already on the new both verify; after
// the overlap only the new one signs.
func TestRotationOverlap(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	type seen struct {
		id, ts, sig string
		body        []byte
	}
	var mu sync.Mutex
	var msgs []seen
	ep, oldSecret := endpoint(t, db, "acme", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		msgs = append(msgs, seen{r.Header.Get(HeaderID), r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature), b})
		mu.Unlock()
	}), 4)
	newSecret, err := RotateSecret(ctx, db, "acme", ep.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RotateSecret(ctx, db, "globex", ep.ID, time.Hour); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another tenant rotated the secret: %v", err)
	}
	h := start(t, db, nil)
	h.submit(noteOf("acme", "paysched.payment.completed", "m1", time.Now()))
	// The overlap ends: only the new secret signs.
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET rotate_until = now() - interval '1 second' WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.submit(noteOf("acme", "paysched.payment.completed", "m2", time.Now()))
	if len(msgs) != 2 {
		t.Fatalf("%d messages received", len(msgs))
	}
	for i, m := range msgs {
		var body struct{ Type string }
		if err := json.Unmarshal(m.body, &body); err != nil || body.Type != "paysched.payment.completed" {
			t.Errorf("body %s: %v", m.body, err)
		}
		oldErr := Verify(oldSecret, m.id, m.ts, m.sig, m.body, time.Now())
		newErr := Verify(newSecret, m.id, m.ts, m.sig, m.body, time.Now())
		if newErr != nil {
			t.Errorf("message %d: the new secret does not verify: %v", i, newErr)
		}
		if i == 0 && oldErr != nil {
			t.Errorf("during the overlap the old secret does not verify: %v", oldErr)
		}
		if i == 1 && oldErr == nil {
			t.Errorf("after the overlap the old secret still verifies")
		}
	}
}

// Recover brings back exactly the failed deliveries of the endpoint noted
// in [since, until); resend brings back one message, delivered or not, and
// the retry path delivers it again under the same webhook-id, the earlier
// attempt kept in the log.
func TestRecoverSinceAndResend(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	var ids sync.Map
	ep, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }), 4)
	other, _ := endpoint(t, db, "acme", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		n, _ := ids.LoadOrStore(r.Header.Get(HeaderID), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}), 4)
	h := start(t, db, nil)
	base := time.Now().Add(-10 * time.Hour).Truncate(time.Second)
	var notes []notification.Note
	for i := range 10 { // m0..m9 noted an hour apart
		notes = append(notes, noteOf("acme", "paysched.payment.completed", "m"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Hour)))
	}
	h.submit(notes...)
	if _, err := db.Exec(ctx, `UPDATE webhook_deliveries SET state = '`+Undelivered+`', attempts = 8, done_at = now() WHERE endpoint_id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	until := base.Add(7 * time.Hour)
	n, err := Recover(ctx, db, "acme", ep.ID, base.Add(3*time.Hour), &until)
	if err != nil || n != 4 {
		t.Fatalf("recover: %d, %v; want 4 (m3..m6)", n, err)
	}
	for id, d := range deliveriesOf(t, db, ep.ID) {
		i, _ := strconv.Atoi(id[1:])
		if want := map[bool]bool{true: true, false: false}[i >= 3 && i < 7]; (d.state != Undelivered) != want {
			t.Errorf("%s: %s (recovered: %v)", id, d.state, want)
		}
	}
	if _, err := Recover(ctx, db, "globex", ep.ID, base, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant recovered: %v", err)
	}
	if _, err := Recover(ctx, db, "acme", ep.ID, base, &base); !errors.Is(err, ErrInvalid) {
		t.Errorf("until = since: %v", err)
	}
	if err := Resend(ctx, db, "acme", other.ID, "m9"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the resent message", func() bool {
		d := deliveriesOf(t, db, other.ID)["m9"]
		return d.state == DeliveredState && d.attempts == 2
	})
	if v, _ := ids.Load("m9"); v.(*atomic.Int32).Load() != 2 {
		t.Fatalf("m9 received %d times", v.(*atomic.Int32).Load())
	}
	log, err := Attempts(ctx, db, "acme", nil, &other.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	n9 := 0
	for _, a := range log {
		if a.MsgID == "m9" {
			n9++
		}
	}
	if n9 != 2 {
		t.Fatalf("the log shows %d attempts of m9, want 2 (the first and the resend)", n9)
	}
	if err := Resend(ctx, db, "acme", other.ID, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("resend of an unknown message: %v", err)
	}
}

// An attempt whose lease ran out, and whose delivery was claimed again,
// records nothing: the newer attempt owns it.
func TestAStaleAttemptRecordsNothing(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	ep, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }), 4)
	h := start(t, db, func(d *Deliverer) { d.Poll = time.Hour }) // no retry path racing the test
	h.submit(noteOf("acme", "paysched.payment.completed", "m1", time.Now()))
	claim := func() (int64, int) {
		t.Helper()
		var id int64
		var attempt int
		if err := db.QueryRow(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1, lease_until = now() + interval '1 minute'
			WHERE endpoint_id = $1 RETURNING id, attempts`, ep.ID).Scan(&id, &attempt); err != nil {
			t.Fatal(err)
		}
		return id, attempt
	}
	id, first := claim()
	_, second := claim() // the lease ran out, and another claim took it
	tgt := h.d.targets.get(ep.ID)
	status := int32(502)
	at := time.Now()
	stale := result{j: &job{m: &message{id: "m1"}, t: tgt, id: id, attempt: first}, state: Waiting, next: at, at: &at, status: &status}
	if err := h.d.write(ctx, []result{stale}); err != nil {
		t.Fatal(err)
	}
	if d := deliveriesOf(t, db, ep.ID)["m1"]; d.status == nil || *d.status != 500 {
		t.Fatalf("the stale attempt was recorded: %+v", d)
	}
	owning := stale
	owning.j = &job{m: &message{id: "m1"}, t: tgt, id: id, attempt: second}
	if err := h.d.write(ctx, []result{owning}); err != nil {
		t.Fatal(err)
	}
	if d := deliveriesOf(t, db, ep.ID)["m1"]; d.status == nil || *d.status != 502 {
		t.Fatalf("the owning attempt was not recorded: %+v", d)
	}
}

// A failure starts the endpoint's clock toward disabling; a success stops
// it. Failing for DisableAfter disables the endpoint.
func TestFailureClock(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	var calls atomic.Int32
	ep, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) != 2 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}), 4)
	since := func() *time.Time {
		var s *time.Time
		if err := db.QueryRow(ctx, `SELECT failing_since FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	h := start(t, db, nil)
	h.submit(noteOf("acme", "paysched.payment.completed", "m1", time.Now())) // 500
	if since() == nil {
		t.Fatal("a failure did not start the clock")
	}
	// A success stops a clock that has run a minute (a younger one is
	// left: an endpoint failing every other attempt does not write its row
	// each time).
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '2 minutes'`); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.submit(noteOf("acme", "paysched.payment.completed", "m2", time.Now())) // 204
	if s := since(); s != nil {
		t.Fatalf("a success left the clock running since %s", s)
	}
	h.submit(noteOf("acme", "paysched.payment.completed", "m3", time.Now())) // 500: the clock starts
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '5 days 1 minute'`); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	h.submit(noteOf("acme", "paysched.payment.completed", "m4", time.Now())) // 500, failing for over 5 days: disabled
	var enabled bool
	if err := db.QueryRow(ctx, `SELECT enabled FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&enabled); err != nil {
		t.Fatal(err)
	}
	if enabled {
		t.Fatal("failing for 5 days: still enabled")
	}
}

// Retention lets finished deliveries and their messages go, and keeps
// what is still owed, whatever its age (review item 6).
func TestRetentionLetsOldRowsGo(t *testing.T) {
	db, _ := newDB(t)
	ctx := context.Background()
	ok, _ := endpoint(t, db, "acme", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), 4)
	failing, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }), 4)
	h := start(t, db, nil)
	h.submit(noteOf("acme", "paysched.payment.completed", "old", time.Now().Add(-40*24*time.Hour)),
		noteOf("acme", "paysched.payment.completed", "new", time.Now()))
	if _, err := db.Exec(ctx, `UPDATE webhook_deliveries SET done_at = now() - interval '40 days' WHERE msg_id = 'old' AND state <> 'WAITING'`); err != nil {
		t.Fatal(err)
	}
	n, err := Sweep(ctx, db, time.Now().Add(-30*24*time.Hour), 1)
	if err != nil || n != 1 {
		t.Fatalf("swept %d, %v; want the old delivered one", n, err)
	}
	if _, ok := deliveriesOf(t, db, ok.ID)["old"]; ok {
		t.Fatal("the old delivery is still there")
	}
	if d := deliveriesOf(t, db, failing.ID)["old"]; d.state != Waiting {
		t.Fatalf("the old delivery still owed was let go: %+v", d)
	}
	var msgs int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM webhook_messages`).Scan(&msgs); err != nil || msgs != 2 {
		t.Fatalf("%d messages, %v: the one still owed must stay", msgs, err)
	}
}

// An endpoint made a moment before a payment's change receives its
// notification: an event newer than the endpoint cache makes it read the
// changes first (the cache's own refresh is a second apart).
func TestAnEndpointMadeJustBeforeAnEventReceivesIt(t *testing.T) {
	db, _ := newDB(t)
	h := start(t, db, nil)
	var got atomic.Int32
	ep, _ := endpoint(t, db, "acme", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }), 4)
	h.submit(noteOf("acme", "paysched.payment.completed", "m1", time.Now()))
	if d := deliveriesOf(t, db, ep.ID)["m1"]; d.state != DeliveredState || got.Load() != 1 {
		t.Fatalf("the event after the endpoint was made: %+v, received %d", d, got.Load())
	}
}

// A notification read again (a restart, a rebalance, offsets a broker
// lost) whose deliveries are recorded is not sent again: the dispatcher
// asks which are before it submits a poll's notifications.
func TestANotificationReadAgainIsNotSentAgain(t *testing.T) {
	db, _ := newDB(t)
	var got atomic.Int32
	ep, _ := endpoint(t, db, "acme", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }), 4)
	h := start(t, db, nil)
	n := noteOf("acme", "paysched.payment.completed", "m1", time.Now())
	h.submit(n)
	known, err := h.d.Recorded(context.Background(), []string{"m1", "m2"})
	if err != nil {
		t.Fatal(err)
	}
	if !known["m1"][ep.ID] || len(known["m2"]) != 0 {
		t.Fatalf("recorded: %v", known)
	}
	done := make(chan struct{})
	h.d.SubmitKnown(n, func() { close(done) }, known["m1"])
	<-done
	if got.Load() != 1 {
		t.Fatalf("received %d times", got.Load())
	}
}
