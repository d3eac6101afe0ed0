// Package ratelimit limits each actor's request rate with an in-memory token
// bucket per actor, so that one client flooding the API is refused (gRPC
// ResourceExhausted, REST 429 with Retry-After) instead of slowing everyone.
//
// Buckets live in a sharded map. A bucket idle long enough to have refilled
// completely is indistinguishable from a new one, so it is evicted; each
// shard also has a hard cap on its size. Memory therefore stays bounded by
// the number of actors active in the last few seconds, and by MaxKeys in
// any case.
//
// The limit is per process: behind N replicas an actor may reach N times
// the rate.
package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
)

// Defaults of payments-api's --actor-rate and --actor-burst, in payments
// (a batchCreate costs one token per item): a thousand a second
// sustained, and twenty thousand at once after a quiet spell, enough for a
// payroll of 100,000 sent in batches over a couple of minutes, and far
// above what a person or a well-behaved integration sends; one tenant
// cannot take the API from the others. Per replica (docs/OPERATIONS.md):
// behind N replicas an actor may reach N times the rate. The benchmarks
// turn it off (--actor-rate 0).
const (
	DefaultRate  = 1_000
	DefaultBurst = 20_000
)

const (
	shardCount = 64
	// DefaultMaxKeys bounds the buckets held across all shards when
	// Config.MaxKeys is zero: some tens of bytes each, a few MiB in all.
	DefaultMaxKeys = 1 << 17
	// minSweepEvery is the least time between two idle sweeps of a shard.
	minSweepEvery = time.Second
)

// Config sets a Limiter's rate.
type Config struct {
	// Rate is the sustained requests per second allowed to one actor;
	// zero or less disables limiting.
	Rate float64
	// Burst is how many requests an idle actor may send at once: Rate
	// (rounded up) when zero, and at least 1.
	Burst int
	// MaxKeys bounds how many actors are tracked at once (DefaultMaxKeys
	// when zero; rounded up to a multiple of the 64 shards). Past it, an
	// arbitrary bucket is forgotten, which only gives that actor a fresh
	// burst.
	MaxKeys int
	// Now is the clock (time.Now when nil); tests substitute their own.
	Now func() time.Time
}

// Limiter holds one token bucket per actor. It is safe for concurrent use.
// A nil *Limiter allows everything.
type Limiter struct {
	rate     float64 // tokens per nanosecond
	burst    float64
	fill     int64 // nanoseconds for an empty bucket to refill completely
	maxShard int
	now      func() time.Time
	epoch    time.Time
	seed     maphash.Seed
	shards   [shardCount]shard
}

type shard struct {
	mu        sync.Mutex
	buckets   map[string]*bucket
	nextSweep int64
	// Pad to a cache line so that neighbouring shards' locks do not share one.
	_ [40]byte
}

type bucket struct {
	tokens float64
	last   int64 // nanoseconds since the limiter's epoch
}

// New returns a Limiter for cfg, or nil (allow everything) when cfg.Rate is
// not positive.
func New(cfg Config) *Limiter {
	if cfg.Rate <= 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0) {
		return nil
	}
	burst := float64(cfg.Burst)
	if cfg.Burst == 0 {
		burst = math.Ceil(cfg.Rate)
	}
	burst = max(burst, 1)
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	l := &Limiter{
		rate:     cfg.Rate / float64(time.Second),
		burst:    burst,
		maxShard: (maxKeys + shardCount - 1) / shardCount,
		now:      now,
		epoch:    now(),
		seed:     maphash.MakeSeed(),
	}
	l.fill = int64(math.Ceil(burst / l.rate))
	for i := range l.shards {
		l.shards[i].buckets = map[string]*bucket{}
	}
	return l
}

// Allow takes a token from key's bucket. When the bucket is empty it
// returns false and how long until a token is available.
func (l *Limiter) Allow(key string) (bool, time.Duration) { return l.AllowN(key, 1) }

// AllowN takes n tokens from key's bucket (at most a full bucket's worth:
// a request larger than the burst waits for a full bucket). When there
// are not enough it takes none and returns false and how long until there
// are.
func (l *Limiter) AllowN(key string, n int) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	need := min(float64(max(n, 1)), l.burst)
	now := l.now().Sub(l.epoch).Nanoseconds()
	s := &l.shards[maphash.String(l.seed, key)%shardCount]
	s.mu.Lock()
	defer s.mu.Unlock()
	if now >= s.nextSweep {
		s.sweep(now, l.fill)
		s.nextSweep = now + max(l.fill, minSweepEvery.Nanoseconds())
	}
	b, ok := s.buckets[key]
	if !ok {
		if len(s.buckets) >= l.maxShard {
			// The shard is full: forget one bucket at random, which at
			// worst grants its actor a fresh burst.
			for k := range s.buckets {
				delete(s.buckets, k)
				break
			}
		}
		b = &bucket{tokens: l.burst, last: now}
		s.buckets[key] = b
	}
	if elapsed := now - b.last; elapsed > 0 {
		b.tokens = min(l.burst, b.tokens+float64(elapsed)*l.rate)
		b.last = now
	}
	if b.tokens >= need {
		b.tokens -= need
		return true, 0
	}
	wait := time.Duration(math.Ceil((need - b.tokens) / l.rate))
	return false, max(wait, time.Nanosecond)
}

// sweep forgets buckets that have been idle long enough to be full again:
// a new bucket would start in the same state.
func (s *shard) sweep(now, fill int64) {
	for k, b := range s.buckets {
		if now-b.last >= fill {
			delete(s.buckets, k)
		}
	}
}

// Len returns how many actors are tracked now.
func (l *Limiter) Len() int {
	if l == nil {
		return 0
	}
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.buckets)
		s.mu.Unlock()
	}
	return n
}

// Check is Allow as an API error: nil when actor may proceed, otherwise
// ResourceExhausted with an ErrorInfo (reason RATE_LIMITED) and a
// RetryInfo saying when to retry.
func (l *Limiter) Check(actor string) error {
	ok, wait := l.Allow(actor)
	if ok {
		return nil
	}
	return Exceeded(wait)
}

// Exceeded is the error of a refused request: ResourceExhausted with an
// ErrorInfo (reason RATE_LIMITED, retryAfterMs in its metadata) and a
// RetryInfo of wait.
func Exceeded(wait time.Duration) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit exceeded: retry in %s", wait.Round(time.Millisecond)))
	withDetails, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: apierr.ReasonRateLimited, Domain: apierr.Domain,
			Metadata: map[string]string{"retryAfterMs": strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10)}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)},
	)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

// Spend takes n more tokens from the calling actor's bucket (a batch's
// items beyond the one its call took): nil, or the error to answer.
func (l *Limiter) Spend(ctx context.Context, n int) error {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Actor == "" || n <= 0 {
		return nil
	}
	if ok, wait := l.AllowN(p.Actor, n); !ok {
		return Exceeded(wait)
	}
	return nil
}

// Admit limits an authenticated call by its actor. Calls without a
// principal (health checks, reflection) pass.
func (l *Limiter) Admit(ctx context.Context) error {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Actor == "" {
		return nil
	}
	return l.Check(p.Actor)
}

// UnaryInterceptor applies Admit to every unary call. It must run after
// the authentication interceptor, which puts the principal in the context.
func (l *Limiter) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := l.Admit(ctx); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}
