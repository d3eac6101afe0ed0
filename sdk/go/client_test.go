package paysched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fake is a test server: handle answers each request; it records them.
type fake struct {
	mu     sync.Mutex
	reqs   []*http.Request
	bodies []string
	srv    *httptest.Server
}

func newFake(t *testing.T, handle func(n int, w http.ResponseWriter, r *http.Request, body string)) *fake {
	f := &fake{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, r)
		f.bodies = append(f.bodies, string(b))
		n := len(f.reqs)
		f.mu.Unlock()
		handle(n, w, r, string(b))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// client is a Client of f that records its waits instead of sleeping.
func (f *fake) client(t *testing.T, opts ...Option) (*Client, *[]time.Duration) {
	t.Helper()
	var waits []time.Duration
	opts = append([]Option{WithToken("tok"), func(s *settings) {
		s.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	}}, opts...)
	c, err := New(f.srv.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, &waits
}

func rpcError(w http.ResponseWriter, status, code int, reason, msg string, extra ...string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	details := fmt.Sprintf(`{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":%q,"domain":"paysched","metadata":{"k":"v"}}`, reason)
	for _, e := range extra {
		details += "," + e
	}
	fmt.Fprintf(w, `{"code":%d,"message":%q,"details":[%s]}`, code, msg, details)
}

const paymentJSON = `{"paymentId":"p1","status":"PENDING","amount":1250,"currency":"EUR"}`

func TestARetrySendsTheSameIdempotencyKeyAndHonoursRetryAfter(t *testing.T) {
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request, _ string) {
		switch n {
		case 1:
			w.Header().Set("Retry-After", "2")
			rpcError(w, 503, 14, "UNAVAILABLE", "busy")
		case 2:
			w.Header().Set("Retry-After", "1")
			rpcError(w, 429, 8, "RATE_LIMITED", "slow down")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(201)
			fmt.Fprint(w, paymentJSON)
		}
	})
	c, waits := f.client(t)
	amount := int64(1250)
	got, err := c.CreatePayment(context.Background(), NewPayment{Amount: &amount})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(f.reqs))
	}
	key := f.reqs[0].Header.Get("Idempotency-Key")
	for i, r := range f.reqs {
		if r.Header.Get("Idempotency-Key") != key || key == "" || f.bodies[i] != f.bodies[0] || r.Header.Get("Authorization") != "Bearer tok" {
			t.Fatalf("request %d: key %q (first %q), body %q, auth %q", i, r.Header.Get("Idempotency-Key"), key, f.bodies[i], r.Header.Get("Authorization"))
		}
	}
	if len(*waits) != 2 || (*waits)[0] < 2*time.Second || (*waits)[1] < time.Second {
		t.Fatalf("waits %v: want at least the Retry-After of each (2 s, 1 s)", *waits)
	}
	if !got.Replayed || got.IdempotencyKey != key || *got.Value.PaymentId != "p1" {
		t.Fatalf("created %+v", got)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	for _, c := range []struct {
		name       string
		retryAfter string
		attempts   int
	}{
		{"always 503", "", 4},
		{"a Retry-After past the bound is not waited for", "3600", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ string) {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				rpcError(w, 503, 14, "UNAVAILABLE", "down")
			})
			cl, waits := f.client(t)
			_, err := cl.GetPayment(context.Background(), "p1")
			if !errors.Is(err, ErrUnavailable) || len(f.reqs) != c.attempts {
				t.Fatalf("%v after %d requests, want UNAVAILABLE after %d", err, len(f.reqs), c.attempts)
			}
			for i := 1; i < len(*waits); i++ {
				if (*waits)[i] > DefaultRetry.Max {
					t.Fatalf("wait %d: %s past the policy's max", i, (*waits)[i])
				}
			}
		})
	}
}

func TestANetworkErrorIsRetriedAndAPostWithoutAKeyIsNot(t *testing.T) {
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request, _ string) {
		if n == 1 {
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close() // the connection dies with no answer
			return
		}
		if r.Method == http.MethodPost {
			rpcError(w, 503, 14, "UNAVAILABLE", "down")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, paymentJSON)
	})
	c, _ := f.client(t)
	if _, err := c.GetPayment(context.Background(), "p1"); err != nil || len(f.reqs) != 2 {
		t.Fatalf("a GET after a dropped connection: %v after %d requests", err, len(f.reqs))
	}
	// A pause through the generated layer carries no key: sent once.
	r, err := c.API().PauseScheduleWithResponse(context.Background(), "s1", PauseBody{})
	if err != nil || r.StatusCode() != 503 || len(f.reqs) != 3 {
		t.Fatalf("a POST without a key: %v, %d requests", err, len(f.reqs))
	}
}

func TestPagesAreIterated(t *testing.T) {
	pages := map[string]string{
		"":   `{"payments":[{"paymentId":"a"},{"paymentId":"b"},{"paymentId":"c"}],"nextCursor":"c2"}`,
		"c2": `{"payments":[{"paymentId":"d"},{"paymentId":"e"}],"nextCursor":"c3"}`,
		"c3": `{"payments":[{"paymentId":"f"}],"nextCursor":""}`,
	}
	f := newFake(t, func(_ int, w http.ResponseWriter, r *http.Request, _ string) {
		if r.URL.Query().Get("status") != "PENDING" || r.URL.Query().Get("pageSize") != "3" {
			rpcError(w, 400, 3, "VALIDATION_FAILED", "bad filter")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, pages[r.URL.Query().Get("cursor")])
	})
	c, _ := f.client(t)
	var ids []string
	for p, err := range c.Payments(context.Background(), ListPayments{Status: "PENDING", PageSize: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, *p.PaymentId)
	}
	if strings.Join(ids, "") != "abcdef" || len(f.reqs) != 3 {
		t.Fatalf("iterated %v in %d requests", ids, len(f.reqs))
	}
	// Stopping early fetches no further page.
	for _, err := range c.Payments(context.Background(), ListPayments{Status: "PENDING", PageSize: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if len(f.reqs) != 4 {
		t.Fatalf("%d requests after an early stop, want 4", len(f.reqs))
	}
	// An error ends the iteration, yielded once.
	n := 0
	for _, err := range c.Payments(context.Background(), ListPayments{Status: "FAILED"}) {
		n++
		if !errors.Is(err, ErrValidation) {
			t.Fatalf("got %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("%d yields of the error", n)
	}
}

func TestErrorsAreTypedByReason(t *testing.T) {
	for _, c := range []struct {
		status, code int
		reason       string
		want         error
	}{
		{409, 6, "IDEMPOTENCY_KEY_REUSED", ErrIdempotencyKeyReused},
		{409, 9, "ALREADY_PROCESSING", ErrAlreadyProcessing},
		{404, 5, "NOT_FOUND", ErrNotFound},
		{400, 9, "SCHEDULE_STATE", ErrScheduleState},
		{401, 16, "UNAUTHENTICATED", ErrUnauthenticated},
		{429, 8, "TOO_MANY_PENDING", ErrTooManyPending},
		{400, 3, "VALIDATION_FAILED", ErrValidation},
	} {
		t.Run(c.reason, func(t *testing.T) {
			f := newFake(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ string) {
				w.Header().Set("Retry-After", "99999")
				rpcError(w, c.status, c.code, c.reason, "no",
					`{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"amount","description":"must be positive"}]}`)
			})
			cl, _ := f.client(t)
			_, err := cl.CancelPayment(context.Background(), "p1")
			var e *Error
			if !errors.Is(err, c.want) || !errors.As(err, &e) {
				t.Fatalf("%v: not %v", err, c.want)
			}
			if e.HTTPStatus != c.status || e.Metadata["k"] != "v" || len(e.Violations) != 1 || e.Violations[0].Field != "amount" {
				t.Fatalf("%+v", e)
			}
			for _, other := range []error{ErrIdempotencyKeyReused, ErrAlreadyProcessing, ErrNotFound} {
				if other != c.want && errors.Is(err, other) {
					t.Fatalf("%v is also %v", err, other)
				}
			}
		})
	}
	// A body that is no status still makes an *Error.
	f := newFake(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ string) {
		w.WriteHeader(502)
		fmt.Fprint(w, "bad gateway")
	})
	cl, _ := f.client(t)
	_, err := cl.GetPayment(context.Background(), "p1")
	var e *Error
	if !errors.As(err, &e) || e.HTTPStatus != 502 || e.Message != "bad gateway" {
		t.Fatalf("%v", err)
	}
}

func TestABatchIsSplitAndEachItemKeyed(t *testing.T) {
	f := newFake(t, func(_ int, w http.ResponseWriter, _ *http.Request, body string) {
		var req struct {
			Items []struct {
				RequestID string `json:"requestId"`
			} `json:"items"`
		}
		_ = json.Unmarshal([]byte(body), &req)
		var out []string
		for i, it := range req.Items {
			if it.RequestID == "" {
				rpcError(w, 400, 3, "IDEMPOTENCY_KEY_REQUIRED", "no key")
				return
			}
			out = append(out, fmt.Sprintf(`{"index":%d,"outcome":"OUTCOME_CREATED","payment":{"paymentId":%q}}`, i, it.RequestID))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"results":[%s]}`, strings.Join(out, ","))
	})
	c, _ := f.client(t)
	items := make([]NewPayment, 2500)
	mine := "my-own-key"
	items[7].RequestId = &mine
	res, err := c.CreatePayments(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.reqs) != 3 || len(res) != 2500 {
		t.Fatalf("%d requests, %d results", len(f.reqs), len(res))
	}
	seen := map[string]bool{}
	for i, r := range res {
		if int(*r.Index) != i || seen[*r.Payment.PaymentId] {
			t.Fatalf("result %d: index %d, key %s (a duplicate: %v)", i, *r.Index, *r.Payment.PaymentId, seen[*r.Payment.PaymentId])
		}
		seen[*r.Payment.PaymentId] = true
	}
	if *res[7].Payment.PaymentId != mine || items[0].RequestId == nil || *items[0].RequestId != *res[0].Payment.PaymentId {
		t.Fatalf("the caller's key was not kept, or the keys were not left in the caller's items")
	}
	// Called again with the same items (after an error, say), it sends
	// the same keys: the server makes each payment once.
	again, err := c.CreatePayments(context.Background(), items)
	if err != nil || *again[2499].Payment.PaymentId != *res[2499].Payment.PaymentId {
		t.Fatalf("a second call sent other keys: %v", err)
	}
}

func TestABatchIsSplitByItsSize(t *testing.T) {
	var sizes []int
	f := newFake(t, func(_ int, w http.ResponseWriter, _ *http.Request, body string) {
		var req struct{ Items []json.RawMessage }
		_ = json.Unmarshal([]byte(body), &req)
		sizes = append(sizes, len(req.Items))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"results":[]}`)
	})
	c, _ := f.client(t)
	big := strings.Repeat("x", 400)
	meta := map[string]string{}
	for i := range 20 {
		meta[fmt.Sprint("k", i)] = big // about 8.5 KB an item
	}
	items := make([]NewPayment, 1000)
	for i := range items {
		items[i].Metadata = &meta
	}
	if _, err := c.CreatePayments(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	if len(sizes) < 2 || sizes[0]+sizes[1]+func() int {
		n := 0
		for _, s := range sizes[2:] {
			n += s
		}
		return n
	}() != 1000 {
		t.Fatalf("batches of %v items: want 1,000 split under 4 MiB", sizes)
	}
}

func TestAProxysRefusalIsTyped(t *testing.T) {
	f := newFake(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ string) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "<html>upstream down</html>")
	})
	c, _ := f.client(t)
	_, err := c.GetPayment(context.Background(), "p1")
	var e *Error
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &e) || e.Message != "<html>upstream down</html>" || len(f.reqs) != 4 {
		t.Fatalf("%v after %d requests", err, len(f.reqs))
	}
}

func TestClientCredentialsAuthenticate(t *testing.T) {
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if r.Form.Get("grant_type") != "client_credentials" || r.Form.Get("audience") != "paysched" {
			http.Error(w, "bad grant", http.StatusBadRequest)
			return
		}
		if id, secret, _ := r.BasicAuth(); id != "svc" || secret != "s3cret" {
			http.Error(w, "bad client", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"minted","token_type":"Bearer","expires_in":3600}`)
	}))
	defer idp.Close()
	f := newFake(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, paymentJSON)
	})
	c, err := New(f.srv.URL, WithTokenSource(ClientCredentials(context.Background(), idp.URL, "svc", "s3cret", "paysched")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetPayment(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	if got := f.reqs[0].Header.Get("Authorization"); got != "Bearer minted" {
		t.Fatalf("Authorization %q", got)
	}
}

func TestNewRefusesABadBaseURL(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "http://", "::"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	if _, err := New("http://x", WithRetry(RetryPolicy{})); err == nil {
		t.Error("a zero retry policy accepted")
	}
}
