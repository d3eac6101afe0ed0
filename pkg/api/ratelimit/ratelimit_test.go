package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/ratelimit"
)

// clock is a manual clock, safe for concurrent use.
type clock struct{ ns atomic.Int64 }

var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *clock) now() time.Time          { return base.Add(time.Duration(c.ns.Load())) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func newLimiter(c *clock, rate float64, burst, maxKeys int) *ratelimit.Limiter {
	return ratelimit.New(ratelimit.Config{Rate: rate, Burst: burst, MaxKeys: maxKeys, Now: c.now})
}

func TestBurstThenRefill(t *testing.T) {
	c := &clock{}
	l := newLimiter(c, 10, 5, 0)
	for i := range 5 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("6th request: ok=%v wait=%v, want refused, 100ms", ok, wait)
	}
	c.advance(50 * time.Millisecond)
	if ok, wait := l.Allow("a"); ok || wait != 50*time.Millisecond {
		t.Fatalf("after 50ms: ok=%v wait=%v, want refused, 50ms", ok, wait)
	}
	c.advance(50 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("a token has refilled after 100ms")
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("only one token refilled")
	}
	// Refill is capped at the burst.
	c.advance(time.Hour)
	n := 0
	for {
		if ok, _ := l.Allow("a"); !ok {
			break
		}
		n++
	}
	if n != 5 {
		t.Fatalf("after an hour idle %d requests passed, want the burst of 5", n)
	}
}

func TestActorsAreIndependent(t *testing.T) {
	c := &clock{}
	l := newLimiter(c, 1, 2, 0)
	l.Allow("a")
	l.Allow("a")
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("a is over its burst")
	}
	for i := range 2 {
		if ok, _ := l.Allow("b"); !ok {
			t.Fatalf("b's request %d refused because of a", i)
		}
	}
}

func TestDisabledAndDefaults(t *testing.T) {
	for _, rate := range []float64{0, -1} {
		l := ratelimit.New(ratelimit.Config{Rate: rate, Burst: 1})
		if l != nil {
			t.Fatalf("rate %v: limiter built, want nil (off)", rate)
		}
		for range 1000 {
			if ok, _ := l.Allow("a"); !ok {
				t.Fatal("a nil limiter refused")
			}
		}
		if err := l.Check("a"); err != nil || l.Len() != 0 {
			t.Fatalf("nil limiter: %v, %d keys", err, l.Len())
		}
	}
	// Burst 0 means one second's worth; a fractional rate still allows one.
	c := &clock{}
	l := newLimiter(c, 3, 0, 0)
	n := 0
	for ok := true; ok; ok, _ = l.Allow("a") {
		n++
	}
	if n-1 != 3 {
		t.Fatalf("burst 0 at 3/s allowed %d, want 3", n-1)
	}
	l = newLimiter(c, 0.5, 0, 0)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("burst is at least 1")
	}
	if ok, wait := l.Allow("a"); ok || wait != 2*time.Second {
		t.Fatalf("0.5/s: ok=%v wait=%v, want 2s", ok, wait)
	}
}

func TestIdleBucketsAreEvicted(t *testing.T) {
	c := &clock{}
	l := newLimiter(c, 100, 100, 0) // refills fully in 1s
	for i := range 10_000 {
		l.Allow(fmt.Sprint("actor-", i))
	}
	if n := l.Len(); n != 10_000 {
		t.Fatalf("tracked %d, want 10000", n)
	}
	// Spent buckets that have not refilled stay: forgetting them would
	// reset the limit.
	c.advance(500 * time.Millisecond)
	for i := range 10_000 {
		l.Allow(fmt.Sprint("actor-", i))
	}
	c.advance(1100 * time.Millisecond)
	for i := range 2000 { // touches every shard, each sweeps its idle buckets
		l.Allow(fmt.Sprint("fresh-", i))
	}
	if n := l.Len(); n > 2000 {
		t.Fatalf("after every bucket refilled %d are tracked, want only the 2000 fresh ones", n)
	}
}

func TestKeepsALimitedActorWhileSweeping(t *testing.T) {
	c := &clock{}
	l := newLimiter(c, 1, 1, 0) // refills in 1s; sweeps every 1s
	l.Allow("a")
	for range 50 {
		c.advance(20 * time.Millisecond)
		l.Allow("other")
		if ok, _ := l.Allow("a"); ok && c.ns.Load() < int64(time.Second) {
			t.Fatalf("a got a token after %v", time.Duration(c.ns.Load()))
		}
	}
}

func TestMaxKeysBoundsMemory(t *testing.T) {
	c := &clock{}
	l := newLimiter(c, 1, 1, 6400) // 100 per shard
	for i := range 100_000 {
		l.Allow(fmt.Sprint("actor-", i))
	}
	if n := l.Len(); n > 6400 {
		t.Fatalf("tracked %d actors, cap is 6400", n)
	}
}

// TestConcurrentSameActor: with a frozen clock, exactly the burst passes
// however many goroutines race for one actor's bucket.
func TestConcurrentSameActor(t *testing.T) {
	c := &clock{}
	l := newLimiter(c, 1000, 500, 0)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			for range 100 {
				if ok, _ := l.Allow("flood"); ok {
					allowed.Add(1)
				}
				l.Allow("bystander")
			}
		}()
	}
	close(gate)
	wg.Wait()
	if n := allowed.Load(); n != 500 {
		t.Fatalf("%d requests passed, want exactly the burst of 500", n)
	}
}

// TestConcurrentRealClock: under a real clock, what passes never exceeds
// burst + rate × elapsed.
func TestConcurrentRealClock(t *testing.T) {
	const rate, burst = 2000, 100
	l := ratelimit.New(ratelimit.Config{Rate: rate, Burst: burst})
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(200 * time.Millisecond)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if ok, _ := l.Allow("flood"); ok {
					allowed.Add(1)
				}
				l.Allow(fmt.Sprint("w", w))
			}
		}()
	}
	wg.Wait()
	limit := burst + rate*time.Since(start).Seconds()
	if n := float64(allowed.Load()); n > limit+1 {
		t.Fatalf("%v passed, limit %v", n, limit)
	}
	if allowed.Load() < burst {
		t.Fatalf("only %d passed, fewer than the burst", allowed.Load())
	}
}

func TestCheckError(t *testing.T) {
	c := &clock{}
	l := newLimiter(c, 4, 1, 0)
	if err := l.Check("a"); err != nil {
		t.Fatal(err)
	}
	err := l.Check("a")
	if status.Code(err) != codes.ResourceExhausted || apierr.Reason(err) != apierr.ReasonRateLimited {
		t.Fatalf("got %v", err)
	}
	var delay time.Duration
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			delay = ri.GetRetryDelay().AsDuration()
		}
	}
	if delay != 250*time.Millisecond {
		t.Fatalf("RetryInfo delay %v, want 250ms", delay)
	}
}

func TestUnaryInterceptor(t *testing.T) {
	c := &clock{}
	l := newLimiter(c, 1, 1, 0)
	icpt := l.UnaryInterceptor()
	calls := 0
	h := func(context.Context, any) (any, error) { calls++; return "ok", nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/paysched.v1.PaymentsService/ListScheduledPayments"}
	alice := auth.WithPrincipal(context.Background(), auth.Principal{Actor: "alice"})
	if _, err := icpt(alice, nil, info, h); err != nil {
		t.Fatal(err)
	}
	if _, err := icpt(alice, nil, info, h); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call: %v", err)
	}
	// No principal (health, reflection): never limited.
	for range 5 {
		if _, err := icpt(context.Background(), nil, info, h); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 6 {
		t.Fatalf("handler ran %d times, want 6", calls)
	}
}
