// Package sdkgo drives the Go SDK (sdk/go) against a real payments-api,
// started in process over a fresh database as the other client tests
// start it: creates, reads, pages, cancels and batches; an idempotent
// replay and a conflicting reuse; a create whose answer is lost to an
// injected 503, retried into exactly one payment; recurring schedules; the
// tenant's webhook endpoints; and deliveries signed by the npm
// standardwebhooks package, verified by the SDK.
package sdkgo_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysched/paysched/test/apitest"
	"github.com/paysched/paysched/test/nodetest"
	"github.com/paysched/paysched/test/pgtest"

	paysched "github.com/paysched/paysched/sdk/go"
	"github.com/paysched/paysched/sdk/go/webhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func client(t *testing.T, base, actor, tenant string) *paysched.Client {
	t.Helper()
	c, err := paysched.New(base, paysched.WithToken(apitest.Token(t, actor, tenant)), paysched.WithRetry(paysched.RetryPolicy{Attempts: 4,
		Base: 10 * time.Millisecond, Max: 100 * time.Millisecond, MaxRetryAfter: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }

func newPayment(amount int64) paysched.NewPayment {
	return paysched.NewPayment{Payee: ptr("landlord"), Amount: ptr(amount), Currency: ptr("EUR"), DueAt: ptr(time.Now().Add(24 * time.Hour))}
}

func TestTheSDKAgainstTheServer(t *testing.T) {
	base := apitest.Start(t)
	ctx := context.Background()
	c := client(t, base, "rita", "")

	// Create, get, list past a page, cancel.
	var ids []string
	for i := range 5 {
		p, err := c.CreatePayment(ctx, newPayment(int64(100+i)))
		if err != nil {
			t.Fatal(err)
		}
		if p.Replayed || *p.Value.Status != "PENDING" {
			t.Fatalf("create %d: %+v", i, p)
		}
		ids = append(ids, *p.Value.PaymentId)
	}
	got, err := c.GetPayment(ctx, ids[0])
	if err != nil || *got.Amount != 100 {
		t.Fatalf("get: %v %v", got, err)
	}
	n := 0
	for p, err := range c.Payments(ctx, paysched.ListPayments{PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		if *p.PaymentId != ids[len(ids)-1-n] {
			t.Fatalf("payment %d of the list: %s, want %s (newest first)", n, *p.PaymentId, ids[len(ids)-1-n])
		}
		n++
	}
	if n != 5 {
		t.Fatalf("listed %d of 5 across pages of 2", n)
	}
	cancelled, err := c.CancelPayment(ctx, ids[1])
	if err != nil || *cancelled.Status != "CANCELLED" {
		t.Fatalf("cancel: %v %v", cancelled, err)
	}
	if _, err := c.GetPayment(ctx, "0197a000-0000-7000-8000-00000000dead"); !errors.Is(err, paysched.ErrNotFound) {
		t.Fatalf("get of no payment: %v", err)
	}
	if _, err := c.CreatePayment(ctx, newPayment(-1)); !errors.Is(err, paysched.ErrValidation) {
		t.Fatalf("a negative amount: %v", err)
	} else {
		var e *paysched.Error
		if !errors.As(err, &e) || len(e.Violations) == 0 || e.Violations[0].Field != "amount" {
			t.Fatalf("the violation: %+v", e)
		}
	}

	// An idempotent replay, and a conflicting reuse of its key.
	key := paysched.NewKey()
	first, err := c.CreatePayment(ctx, newPayment(777), paysched.WithIdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreatePayment(ctx, paysched.NewPayment{Payee: first.Value.Payee, Amount: first.Value.Amount, Currency: first.Value.Currency,
		DueAt: first.Value.DueAt}, paysched.WithIdempotencyKey(key))
	if err != nil || !again.Replayed || *again.Value.PaymentId != *first.Value.PaymentId {
		t.Fatalf("the replay: %+v %v", again, err)
	}
	if _, err := c.CreatePayment(ctx, newPayment(778), paysched.WithIdempotencyKey(key)); !errors.Is(err, paysched.ErrIdempotencyKeyReused) {
		t.Fatalf("a reuse with another body: %v", err)
	}

	// A batch longer than the server's limit.
	items := make([]paysched.NewPayment, paysched.MaxBatch+5)
	for i := range items {
		items[i] = newPayment(int64(1 + i))
	}
	results, err := c.CreatePayments(ctx, items)
	if err != nil || len(results) != len(items) {
		t.Fatalf("batch: %d results, %v", len(results), err)
	}
	for i, r := range results {
		if *r.Index != int32(i) || *r.Outcome != "OUTCOME_CREATED" {
			t.Fatalf("batch result %d: %+v", i, r)
		}
	}
}

// TestALostAnswerIsRetriedIntoOnePayment: a proxy forwards the first
// create to the server and answers the client 503, as a load balancer
// that lost the answer would; the SDK sends it again with the same key
// and the server answers the payment it made: one payment.
func TestALostAnswerIsRetriedIntoOnePayment(t *testing.T) {
	base := apitest.Start(t)
	target, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var lost atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && lost.Add(1) == 1 {
			rec := httptest.NewRecorder()
			proxy.ServeHTTP(rec, r)
			if rec.Code != http.StatusCreated {
				t.Errorf("the server answered the first create %d", rec.Code)
			}
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"code":14,"message":"upstream lost"}`, http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	ctx := context.Background()
	c := client(t, front.URL, "sam", "")
	p, err := c.CreatePayment(ctx, newPayment(4200))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Replayed || lost.Load() != 2 {
		t.Fatalf("replayed %v after %d creates sent", p.Replayed, lost.Load())
	}
	n := 0
	for _, err := range c.Payments(ctx, paysched.ListPayments{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d payments after a lost answer and its retry, want 1", n)
	}
}

func TestSchedulesAndEndpointsThroughTheSDK(t *testing.T) {
	base := apitest.Start(t)
	ctx := context.Background()
	c := client(t, base, "tina", "acme")
	start := time.Now().UTC().AddDate(0, 0, 2).Format("2006-01-02") + "T09:00:00"
	s, err := c.CreateSchedule(ctx, paysched.NewSchedule{Payee: ptr("landlord"), Amount: ptr(int64(120000)), Currency: ptr("EUR"),
		Rrule: ptr("FREQ=MONTHLY"), Start: ptr(start), TimeZone: ptr("Europe/London")})
	if err != nil {
		t.Fatal(err)
	}
	id := *s.Value.ScheduleId
	if d, err := c.GetSchedule(ctx, id); err != nil || *d.Schedule.ScheduleId != id {
		t.Fatalf("get schedule: %v %v", d, err)
	}
	preview, err := c.PreviewSchedule(ctx, paysched.Preview{ScheduleId: &id, Count: ptr(int32(3))})
	if err != nil || len(preview) != 3 {
		t.Fatalf("preview: %v %v", preview, err)
	}
	changed := paysched.ScheduleChange{Payee: ptr("landlord"), Amount: ptr(int64(125000)), Currency: ptr("EUR"),
		Rrule: ptr("FREQ=MONTHLY"), Start: ptr(start), TimeZone: ptr("Europe/London")}
	if sc, _, err := c.UpdateSchedule(ctx, id, changed); err != nil || *sc.Amount != 125000 {
		t.Fatalf("update schedule: %v %v", sc, err)
	}
	if _, _, err := c.PauseSchedule(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PauseSchedule(ctx, id, nil); !errors.Is(err, paysched.ErrScheduleState) {
		t.Fatalf("pausing a paused schedule: %v", err)
	}
	if _, err := c.ResumeSchedule(ctx, id); err != nil {
		t.Fatal(err)
	}
	if sc, err := c.CancelSchedule(ctx, id); err != nil || *sc.State != "SCHEDULE_STATE_CANCELLED" {
		t.Fatalf("cancel schedule: %v %v", sc, err)
	}
	n := 0
	for _, err := range c.Schedules(ctx, 1) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d schedules listed", n)
	}

	// The tenant's webhook endpoints.
	ep, err := c.CreateEndpoint(ctx, paysched.NewEndpoint{Url: ptr("http://127.0.0.1:9/hook"), Description: ptr("sdk test")})
	if err != nil {
		t.Fatal(err)
	}
	if ep.Secret == nil || len(*ep.Secret) < 10 {
		t.Fatalf("endpoint: %+v", ep)
	}
	eps, err := c.Endpoints(ctx)
	if err != nil || len(eps) != 1 {
		t.Fatalf("endpoints: %v %v", eps, err)
	}
	rotated, err := c.RotateEndpointSecret(ctx, *ep.Endpoint.EndpointId, time.Hour)
	if err != nil || rotated == *ep.Secret {
		t.Fatalf("rotate: %q %v", rotated, err)
	}
	if err := c.SetEndpointEnabled(ctx, *ep.Endpoint.EndpointId, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WebhookAttempts(ctx, paysched.Deliveries{EndpointId: ep.Endpoint.EndpointId}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.RecoverMessages(ctx, *ep.Endpoint.EndpointId, time.Now().Add(-time.Hour), time.Time{}); err != nil || n != 0 {
		t.Fatalf("recover: %d %v", n, err)
	}
	if err := c.ResendMessage(ctx, *ep.Endpoint.EndpointId, "no-such-message"); !errors.Is(err, paysched.ErrNotFound) {
		t.Fatalf("resending a message never sent: %v", err)
	}
	// A payer's token naming no tenant cannot have endpoints.
	if _, err := client(t, base, "nobody", "").Endpoints(ctx); !errors.Is(err, paysched.ErrNoTenant) {
		t.Fatalf("endpoints without a tenant: %v", err)
	}
}

// TestTheSDKVerifiesStandardWebhooksSignatures: deliveries signed by the
// npm standardwebhooks package verify under the SDK; altered, or stale,
// they do not.
func TestTheSDKVerifiesStandardWebhooksSignatures(t *testing.T) {
	nodetest.Require(t, "the cross-language webhook test", "node", "npm")
	dir := nodetest.Install(t, "package.json", "package-lock.json", "sign.mjs")
	key := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a-secret-of-at-least-24-bytes!!"))
	v, err := webhook.NewVerifier(key)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"type":"paysched.payment.completed","timestamp":"2026-12-07T09:00:00Z","data":{"paymentId":"p1","amount":1250}}`
	for _, c := range []struct {
		name string
		age  time.Duration
		body string
		want error
	}{
		{"as signed", 0, body, nil},
		{"another body", 0, body + " ", webhook.ErrSignature},
		{"ten minutes old", 10 * time.Minute, body, webhook.ErrStale},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := time.Now().Add(-c.age).Unix()
			out := nodetest.Run(t, dir, nil, "node", "sign.mjs", key, "msg_"+strconv.FormatInt(ts, 10), strconv.FormatInt(ts, 10), body)
			var signed struct{ ID, Timestamp, Signature string }
			if err := json.Unmarshal([]byte(out), &signed); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			h := http.Header{}
			h.Set("webhook-id", signed.ID)
			h.Set("webhook-timestamp", signed.Timestamp)
			h.Set("webhook-signature", signed.Signature)
			if _, err := v.Verify(h, []byte(c.body)); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}
