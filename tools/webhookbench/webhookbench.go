// Package webhookbench is `make bench-webhooks`: the webhook-dispatcher (a
// separate process) delivers N payments' notifications, produced onto
// Kafka at a steady rate, to 3 tenants of 2 endpoints each, one endpoint
// failing half its attempts with 500 and one hanging 20 s. It reports how
// soon the healthy endpoints had each event, signatures verified, and
// whether any was lost or duplicated.
package webhookbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/webhook"
	"github.com/paysched/paysched/pkg/payment"
)

// Config is a run's.
type Config struct {
	DB      *pgxpool.Pool
	Brokers []string
	// N payments; each makes one notification, Rate a second.
	N, Rate int
	// Hang is how long the hanging endpoint holds each request.
	Hang time.Duration
	// Timeout bounds the wait for the healthy endpoints to have everything.
	Timeout time.Duration
	Out     io.Writer
}

// Result is the last line's figures.
type Result struct {
	Delivered, Verified, Lost int
	P99                       time.Duration
	DuplicatesPerEndpoint     int
}

// receiver is one endpoint's server.
type receiver struct {
	name    string
	tenant  string
	healthy bool
	secret  string
	mu      sync.Mutex
	first   map[string]time.Duration // webhook-id → lag of its first verified arrival
	arrived int
	refused atomic.Int64
	srv     *http.Server
	url     string
}

func newReceiver(name, tenant string, healthy bool, handle func(http.ResponseWriter) bool, sent *sync.Map) (*receiver, error) {
	r := &receiver{name: name, tenant: tenant, healthy: healthy, first: map[string]time.Duration{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.url = "http://" + ln.Addr().String() + "/hook"
	r.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get(webhook.HeaderID)
		if !handle(w) {
			return
		}
		now := time.Now()
		if err := webhook.Verify(r.secret, id, req.Header.Get(webhook.HeaderTimestamp), req.Header.Get(webhook.HeaderSignature), body, now); err != nil {
			r.refused.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var lag time.Duration
		if at, ok := sent.Load(id); ok {
			lag = now.Sub(at.(time.Time))
		}
		r.mu.Lock()
		r.arrived++
		if _, seen := r.first[id]; !seen {
			r.first[id] = lag
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Run is one run; its last line is the issue's.
func Run(ctx context.Context, c Config) (Result, error) {
	var sent sync.Map // webhook-id (ce_id) → when produced
	ok := func(http.ResponseWriter) bool { return true }
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	flaky := func(w http.ResponseWriter) bool {
		rngMu.Lock()
		fail := rng.IntN(2) == 0
		rngMu.Unlock()
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		return true
	}
	hang := func(w http.ResponseWriter) bool { time.Sleep(c.Hang); return true }
	specs := []struct {
		tenant, name string
		healthy      bool
		h            func(http.ResponseWriter) bool
	}{
		{"bench-a", "a-healthy", true, ok}, {"bench-a", "a-failing-half", false, flaky},
		{"bench-b", "b-healthy", true, ok}, {"bench-b", "b-hanging", false, hang},
		{"bench-c", "c-healthy-1", true, ok}, {"bench-c", "c-healthy-2", true, ok},
	}
	var recv []*receiver
	defer func() {
		for _, r := range recv {
			_ = r.srv.Close()
		}
	}()
	for _, s := range specs {
		r, err := newReceiver(s.name, s.tenant, s.healthy, s.h, &sent)
		if err != nil {
			return Result{}, err
		}
		recv = append(recv, r)
		_, secret, err := webhook.CreateEndpoint(ctx, c.DB, webhook.Endpoint{Tenant: s.tenant, URL: r.url, Description: s.name,
			MaxInflight: 16, MaxPerSecond: 10000})
		if err != nil {
			return Result{}, fmt.Errorf("endpoint %s: %w", s.name, err)
		}
		r.secret = secret
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return Result{}, err
	}
	defer prod.Close()
	tenants := []string{"bench-a", "bench-b", "bench-c"}
	perTenant := map[string]int{}
	start := time.Now()
	tick := time.Second / time.Duration(max(1, c.Rate/100)) // a burst of 1/100 of the rate each tick
	burst := max(1, c.Rate/(int(time.Second/tick)))
	var produced int
	var perr error
	var pmu sync.Mutex
	for produced < c.N {
		for range min(burst, c.N-produced) {
			id := uuid.NewString()
			tenant := tenants[produced%3]
			perTenant[tenant]++
			now := time.Now()
			sent.Store(id, now)
			data := `{"amount":1250,"currency":"EUR","paymentId":"` + id + `","status":"` + string(payment.Completed) + `","tenant":"` + tenant + `"}`
			prod.Produce(ctx, &kgo.Record{Topic: kafka.Default.Notifications, Key: []byte(id), Value: []byte(data), Headers: []kgo.RecordHeader{
				{Key: "ce_id", Value: []byte(id)}, {Key: "ce_type", Value: []byte("paysched.payment.completed")},
				{Key: "ce_time", Value: []byte(now.UTC().Format(time.RFC3339Nano))}, {Key: "ce_tenant", Value: []byte(tenant)}}},
				func(_ *kgo.Record, err error) {
					if err != nil {
						pmu.Lock()
						perr = err
						pmu.Unlock()
					}
				})
			produced++
		}
		if next := start.Add(time.Duration(produced) * time.Second / time.Duration(c.Rate)); time.Until(next) > 0 {
			time.Sleep(time.Until(next))
		}
	}
	if err := prod.Flush(ctx); err != nil {
		return Result{}, err
	}
	if perr != nil {
		return Result{}, fmt.Errorf("produce: %w", perr)
	}
	fmt.Fprintf(c.Out, "produced %d notifications in %.1fs (%d/s asked)\n", produced, time.Since(start).Seconds(), c.Rate)
	want := func(r *receiver) int { return perTenant[r.tenant] }
	deadline := time.Now().Add(c.Timeout)
	for {
		done := true
		for _, r := range recv {
			r.mu.Lock()
			n := len(r.first)
			r.mu.Unlock()
			if r.healthy && n < want(r) {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var res Result
	var lags []time.Duration
	for _, r := range recv {
		r.mu.Lock()
		dup := r.arrived - len(r.first)
		fmt.Fprintf(c.Out, "endpoint %-15s distinct %7d of %7d  arrivals %7d  refused %d\n", r.name, len(r.first), want(r), r.arrived, r.refused.Load())
		if r.healthy {
			res.Delivered += len(r.first)
			res.Verified += len(r.first)
			res.Lost += want(r) - len(r.first)
			res.DuplicatesPerEndpoint = max(res.DuplicatesPerEndpoint, dup)
			for _, l := range r.first {
				lags = append(lags, l)
			}
		}
		r.mu.Unlock()
		if r.refused.Load() > 0 {
			return res, fmt.Errorf("endpoint %s refused %d signatures", r.name, r.refused.Load())
		}
	}
	slices.Sort(lags)
	if len(lags) > 0 {
		res.P99 = lags[(len(lags)*99+99)/100-1]
		fmt.Fprintf(c.Out, "healthy endpoints: lag p50 %.1f ms  p99 %.1f ms  max %.1f ms (notification produced to first verified arrival)\n",
			ms(lags[len(lags)/2]), ms(res.P99), ms(lags[len(lags)-1]))
	}
	fmt.Fprintf(c.Out, "webhooks delivered=%d verified=%d p99_ms=%.1f duplicates_per_endpoint=%d lost=%d\n",
		res.Delivered, res.Verified, ms(res.P99), res.DuplicatesPerEndpoint, res.Lost)
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
