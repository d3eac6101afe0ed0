package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paysched/paysched/pkg/gateway"
	stripeadapter "github.com/paysched/paysched/pkg/gateway/stripe"
)

// clockAt tells date after failing fails times.
type clockAt struct {
	date  time.Time
	err   error
	fails int32
	asked atomic.Int32
}

func (c *clockAt) Clock(context.Context) (time.Time, error) {
	if c.asked.Add(1) <= c.fails {
		return time.Time{}, status.Error(codes.Unavailable, "not up yet")
	}
	return c.date, c.err
}

// TestCheckClock: within the margin a service starts; beyond it either
// way, or with a gateway that does not tell its clock, it does not; a
// gateway not up yet is asked again within the wait.
func TestCheckClock(t *testing.T) {
	db := time.Now()
	dbNow := func(context.Context) (time.Time, error) { return db, nil }
	for _, c := range []struct {
		name  string
		clock *clockAt
		wait  time.Duration
		ok    bool
	}{
		{"same", &clockAt{date: db}, 0, true},
		{"within the margin, ahead", &clockAt{date: db.Add(gateway.ClockSkew - time.Minute)}, 0, true},
		{"within the margin, behind", &clockAt{date: db.Add(-gateway.ClockSkew + time.Minute)}, 0, true},
		{"beyond the margin, ahead", &clockAt{date: db.Add(gateway.ClockSkew + time.Minute)}, 0, false},
		{"beyond the margin, behind", &clockAt{date: db.Add(-gateway.ClockSkew - time.Minute)}, 0, false},
		{"no date", &clockAt{err: gateway.ErrNoDate}, time.Minute, false},
		{"up after two tries", &clockAt{date: db, fails: 2}, time.Minute, true},
		{"never up", &clockAt{date: db, fails: 1 << 30}, 2 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := gateway.CheckClock(context.Background(), c.clock, dbNow, c.wait)
			if (err == nil) != c.ok {
				t.Fatalf("got %v, want ok=%v", err, c.ok)
			}
			if errors.Is(c.clock.err, gateway.ErrNoDate) && c.clock.asked.Load() != 1 {
				t.Fatalf("asked %d times: a gateway that answered without its clock is refused at once", c.clock.asked.Load())
			}
		})
	}
}

// TestStripeTellsItsClock: the Stripe adapter reads Stripe's clock from an
// answer's Date header.
func TestStripeTellsItsClock(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/v1/payment_intents") {
			t.Errorf("asked %s %s", r.Method, r.URL.Path)
		}
		w.Header().Set("Date", time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).Format(http.TimeFormat))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","url":"/v1/payment_intents","has_more":false,"data":[]}`))
	}))
	defer srv.Close()
	a, err := stripeadapter.New(stripeadapter.Config{APIKey: "sk_test_x", URL: srv.URL, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Clock(context.Background())
	if err != nil || !got.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("got %v, %v", got, err)
	}
}
