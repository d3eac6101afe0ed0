package webhook

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
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db, err := pgxpool.New(context.Background(), pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

// endpoint registers a loopback endpoint of tenant for h.
func endpoint(t *testing.T, db store.DB, tenant string, h http.Handler, maxInflight int, types ...string) (Endpoint, string) {
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

// note is a notification record of tenant (by header), as the
// audit-consumer's would be.
func note(tenant, typ, id string, at time.Time) *kgo.Record {
	return &kgo.Record{Key: []byte(uuid.NewString()), Value: []byte(`{"paymentId":"x","status":"COMPLETED"}`), Headers: []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte(id)}, {Key: "ce_type", Value: []byte(typ)},
		{Key: "ce_time", Value: []byte(at.UTC().Format(time.RFC3339Nano))}, {Key: tenantHeader, Value: []byte(tenant)}}}
}

func worker(db store.DB) *Worker {
	return &Worker{DB: db, Client: Egress{Timeout: 5 * time.Second, Loopback: true}.Client(), Lease: 20 * time.Second}
}

type delivery struct {
	state    string
	attempts int
	next     time.Time
	status   *int
}

func deliveriesOf(t *testing.T, db store.DB, ep uuid.UUID) map[string]delivery {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT msg_id, state, attempts, next_at, last_status FROM webhook_deliveries WHERE endpoint_id = $1`, ep)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]delivery{}
	for rows.Next() {
		var id string
		var d delivery
		if err := rows.Scan(&id, &d.state, &d.attempts, &d.next, &d.status); err != nil {
			t.Fatal(err)
		}
		out[id] = d
	}
	return out
}

// claimAll claims and attempts everything due, once.
func claimAll(t *testing.T, w *Worker) int {
	t.Helper()
	ds, err := w.Claim(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		w.Attempt(context.Background(), d)
	}
	return len(ds)
}

// A notification read twice makes one delivery per subscribed endpoint of
// its tenant: none to an endpoint of another type or another tenant, and
// the tenant of a payment's notification is the payment's.
func TestFanoutOncePerSubscribedEndpoint(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	all, _ := endpoint(t, db, "acme", ok, 4)
	completed, _ := endpoint(t, db, "acme", ok, 4, "paysched.payment.completed")
	other, _ := endpoint(t, db, "globex", ok, 4)
	// A payment of acme's: its notification has no tenant header.
	pay, _ := uuid.NewV7()
	if _, err := store.NewStore(db).Create(ctx, []store.NewPayment{{ID: pay, Payer: "p1", Tenant: "acme", Payee: "shop",
		Amount: 100, Currency: "EUR", DueAt: time.Now().Add(time.Hour), CreatedAt: time.Now(), IdempotencyKey: "k1",
		RequestHash: []byte{1}, Response: []byte{1}}}); err != nil {
		t.Fatal(err)
	}
	byPayment := note("", "paysched.payment.created", "m-pay", time.Now())
	byPayment.Key = []byte(pay.String())
	recs := []*kgo.Record{note("acme", "paysched.payment.completed", "m1", time.Now()),
		note("acme", "paysched.payment.failed", "m2", time.Now()), byPayment}
	for range 2 {
		if err := Fanout(ctx, db, recs); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		ep   Endpoint
		want []string
	}{{all, []string{"m1", "m2", "m-pay"}}, {completed, []string{"m1"}}, {other, nil}} {
		got := deliveriesOf(t, db, c.ep.ID)
		if len(got) != len(c.want) {
			t.Errorf("endpoint %s %v: %d deliveries %v, want %v", c.ep.Tenant, c.ep.EventTypes, len(got), got, c.want)
		}
		for _, id := range c.want {
			if got[id].state != Waiting {
				t.Errorf("endpoint %s %v: %s not pending: %+v", c.ep.Tenant, c.ep.EventTypes, id, got[id])
			}
		}
	}
}

// A 410 disables the endpoint at once and closes the delivery; the event
// announcing it goes out first.
func TestGoneDisablesTheEndpoint(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	gone, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusGone)
	}), 4)
	if err := Fanout(ctx, db, []*kgo.Record{note("acme", "paysched.payment.completed", "m1", time.Now())}); err != nil {
		t.Fatal(err)
	}
	w := worker(db)
	var announced []Disabled
	w.OnDisabled = func(_ context.Context, d Disabled) error { announced = append(announced, d); return nil }
	if n := claimAll(t, w); n != 1 {
		t.Fatalf("claimed %d", n)
	}
	var enabled bool
	var reason string
	if err := db.QueryRow(ctx, `SELECT enabled, coalesce(disabled_reason, '') FROM webhook_endpoints WHERE id = $1`, gone.ID).Scan(&enabled, &reason); err != nil {
		t.Fatal(err)
	}
	if enabled || reason == "" {
		t.Fatalf("after 410: enabled %v, reason %q", enabled, reason)
	}
	if d := deliveriesOf(t, db, gone.ID)["m1"]; d.state != Undelivered || d.status == nil || *d.status != 410 {
		t.Fatalf("delivery after 410: %+v", d)
	}
	if len(announced) != 1 || announced[0].EndpointID != gone.ID || announced[0].Tenant != "acme" {
		t.Fatalf("announced %+v", announced)
	}
	// A disabled endpoint gets no new deliveries, and nothing is claimed.
	if err := Fanout(ctx, db, []*kgo.Record{note("acme", "paysched.payment.completed", "m2", time.Now())}); err != nil {
		t.Fatal(err)
	}
	if n := len(deliveriesOf(t, db, gone.ID)); n != 1 {
		t.Fatalf("%d deliveries to a disabled endpoint", n)
	}
}

// A throttled answer's Retry-After sets the next attempt when it is later
// than the schedule's; without one, the schedule's 5 s (±10%).
func TestRetryAfterIsHonoured(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		status     int
		retryAfter string
		min, max   time.Duration
	}{
		{"503 Retry-After 3600", 503, "3600", 59 * time.Minute, 61 * time.Minute},
		{"429 Retry-After an HTTP date", 429, "date", 9 * time.Minute, 11 * time.Minute},
		{"502, none", 502, "", 4 * time.Second, 6 * time.Second},
		{"500 Retry-After 3600 (not a throttle: ignored)", 500, "3600", 4 * time.Second, 6 * time.Second},
	} {
		ep, _ := endpoint(t, db, c.name, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			ra := c.retryAfter
			if ra == "date" {
				ra = time.Now().Add(10 * time.Minute).UTC().Format(http.TimeFormat)
			}
			if ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			w.WriteHeader(c.status)
		}), 4)
		if err := Fanout(ctx, db, []*kgo.Record{note(c.name, "paysched.payment.completed", "m1", time.Now())}); err != nil {
			t.Fatal(err)
		}
		before := time.Now()
		claimAll(t, worker(db))
		d := deliveriesOf(t, db, ep.ID)["m1"]
		if wait := d.next.Sub(before); d.state != Waiting || d.attempts != 1 || wait < c.min || wait > c.max {
			t.Errorf("%s: %+v, next attempt in %s, want %s to %s", c.name, d, wait.Round(time.Second), c.min, c.max)
		}
	}
}

// A hanging endpoint holds only its own room: another tenant's endpoint,
// whose deliveries came later, gets every one while the hanging one has
// exactly its max_inflight in flight.
func TestASlowEndpointDelaysNoOther(t *testing.T) {
	db := newDB(t)
	ctx, cancel := context.WithCancel(context.Background())
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
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, note("slow", "paysched.payment.completed", fmt.Sprint("s", i), time.Now().Add(-time.Hour)))
	}
	if err := Fanout(ctx, db, recs); err != nil {
		t.Fatal(err)
	}
	recs = recs[:0]
	for i := range 20 {
		recs = append(recs, note("fast", "paysched.payment.completed", fmt.Sprint("f", i), time.Now()))
	}
	if err := Fanout(ctx, db, recs); err != nil {
		t.Fatal(err)
	}
	// No attempt times out within the test: an attempt given up on while
	// its request still hangs at the server would let another in beside it.
	w := &Worker{DB: db, Client: Egress{Timeout: 3 * time.Minute, Loopback: true}.Client(), Lease: 4 * time.Minute, Slots: 8}
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	defer func() { close(release); cancel(); <-done }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n := 0
		for _, d := range deliveriesOf(t, db, fast.ID) {
			if d.state == DeliveredState {
				n++
			}
		}
		if n == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the healthy endpoint got %d of 20 while the slow one hung (in flight there: %d)", n, inflight.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m := most.Load(); m > 2 {
		t.Fatalf("the slow endpoint had %d attempts in flight, above its max_inflight of 2", m)
	}
	_ = slow
}

// During a rotation each delivery carries both signatures, so a receiver
// still on the old secret and one already on the new both verify; after
// the overlap only the new one signs.
func TestRotationOverlap(t *testing.T) {
	db := newDB(t)
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
	if err := Fanout(ctx, db, []*kgo.Record{note("acme", "paysched.payment.completed", "m1", time.Now())}); err != nil {
		t.Fatal(err)
	}
	claimAll(t, worker(db))
	// The overlap ends: only the new secret signs.
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET rotate_until = now() - interval '1 second' WHERE id = $1`, ep.ID); err != nil {
		t.Fatal(err)
	}
	if err := Fanout(ctx, db, []*kgo.Record{note("acme", "paysched.payment.completed", "m2", time.Now())}); err != nil {
		t.Fatal(err)
	}
	claimAll(t, worker(db))
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
// in [since, until); resend brings back one message, delivered or not.
func TestRecoverSinceAndResend(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	ep, _ := endpoint(t, db, "acme", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), 4)
	other, _ := endpoint(t, db, "acme", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), 4)
	base := time.Now().Add(-10 * time.Hour).Truncate(time.Second)
	var recs []*kgo.Record
	for i := range 10 { // m0..m9 noted an hour apart
		recs = append(recs, note("acme", "paysched.payment.completed", "m"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Hour)))
	}
	if err := Fanout(ctx, db, recs); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE webhook_deliveries SET state = '`+Undelivered+`', attempts = 8, done_at = now()`); err != nil {
		t.Fatal(err)
	}
	until := base.Add(7 * time.Hour)
	n, err := Recover(ctx, db, "acme", ep.ID, base.Add(3*time.Hour), &until)
	if err != nil || n != 4 {
		t.Fatalf("recover: %d, %v; want 4 (m3..m6)", n, err)
	}
	for id, d := range deliveriesOf(t, db, ep.ID) {
		i, _ := strconv.Atoi(id[1:])
		if want := map[bool]string{true: Waiting, false: Undelivered}[i >= 3 && i < 7]; d.state != want {
			t.Errorf("%s: %s, want %s", id, d.state, want)
		}
	}
	for id, d := range deliveriesOf(t, db, other.ID) {
		if d.state != Undelivered {
			t.Errorf("the other endpoint's %s recovered", id)
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
	if d := deliveriesOf(t, db, other.ID)["m9"]; d.state != Waiting {
		t.Errorf("resent: %+v", d)
	}
	if err := Resend(ctx, db, "acme", other.ID, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("resend of an unknown message: %v", err)
	}
}

// An attempt whose lease ran out, and whose delivery another worker
// claimed, records nothing: the newer attempt owns it.
func TestAStaleAttemptRecordsNothing(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	ep, _ := endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }), 4)
	if err := Fanout(ctx, db, []*kgo.Record{note("acme", "paysched.payment.completed", "m1", time.Now())}); err != nil {
		t.Fatal(err)
	}
	w := worker(db)
	first, err := w.Claim(ctx, 10)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %v", first, err)
	}
	// The lease runs out; another claim takes it (attempt 2).
	if _, err := db.Exec(ctx, `UPDATE webhook_deliveries SET next_at = now(), lease_until = now()`); err != nil {
		t.Fatal(err)
	}
	second, err := w.Claim(ctx, 10)
	if err != nil || len(second) != 1 || second[0].Attempt != 2 {
		t.Fatalf("second claim: %+v %v", second, err)
	}
	w.Attempt(ctx, first[0])
	var attempts int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM webhook_attempts`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if d := deliveriesOf(t, db, ep.ID)["m1"]; attempts != 0 || d.status != nil {
		t.Fatalf("the stale attempt was recorded: %d attempts, %+v", attempts, d)
	}
	w.Attempt(ctx, second[0])
	if d := deliveriesOf(t, db, ep.ID)["m1"]; d.status == nil || *d.status != 500 || d.state != Waiting {
		t.Fatalf("the owning attempt: %+v", d)
	}
}

// A failure starts the endpoint's clock toward disabling; a success stops
// it. Failing for DisableAfter disables the endpoint (announced).
func TestFailureClock(t *testing.T) {
	db := newDB(t)
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
	due := func() {
		if _, err := db.Exec(ctx, `UPDATE webhook_deliveries SET next_at = now() WHERE state = '`+Waiting+`'`); err != nil {
			t.Fatal(err)
		}
	}
	if err := Fanout(ctx, db, []*kgo.Record{note("acme", "paysched.payment.completed", "m1", time.Now())}); err != nil {
		t.Fatal(err)
	}
	w := worker(db)
	var announced []Disabled
	w.OnDisabled = func(_ context.Context, d Disabled) error { announced = append(announced, d); return nil }
	claimAll(t, w) // 500
	if since() == nil {
		t.Fatal("a failure did not start the clock")
	}
	due()
	claimAll(t, w) // 204
	if s := since(); s != nil {
		t.Fatalf("a success left the clock running since %s", s)
	}
	// Failing again, for longer than DisableAfter.
	if err := Fanout(ctx, db, []*kgo.Record{note("acme", "paysched.payment.completed", "m2", time.Now())}); err != nil {
		t.Fatal(err)
	}
	claimAll(t, w) // 500: the clock starts
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '5 days 1 minute'`); err != nil {
		t.Fatal(err)
	}
	due()
	claimAll(t, w) // 500, failing for over 5 days: disabled
	var enabled bool
	if err := db.QueryRow(ctx, `SELECT enabled FROM webhook_endpoints WHERE id = $1`, ep.ID).Scan(&enabled); err != nil {
		t.Fatal(err)
	}
	if enabled || len(announced) != 1 {
		t.Fatalf("failing for 5 days: enabled %v, announced %v", enabled, announced)
	}
}
