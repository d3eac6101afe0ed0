package tenanthook

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/paysched/paysched/pkg/platform/durations"
)

// Schedule is the delay before each attempt after the first (which is
// immediate). After the last, the delivery is Undelivered (recover brings
// it back).
type Schedule []time.Duration

// DefaultSchedule is the spec's and Svix's: 5 s, 5 min, 30 min, 2 h, 5 h,
// 10 h, 10 h (a day and a few hours in all).
var DefaultSchedule = Schedule{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
	5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// ParseSchedule reads "5s,5m,30m" (the --retry-schedule flag): 1 to 20
// positive delays of at most MaxRetryAfter each.
func ParseSchedule(s string) (Schedule, error) {
	out, err := durations.Parse(s, MaxRetryAfter)
	if err != nil {
		return nil, fmt.Errorf("retry schedule %w", err)
	}
	if len(out) > 20 {
		return nil, fmt.Errorf("retry schedule %q: %d retries, want at most 20", s, len(out))
	}
	return out, nil
}

// String is the flag form.
func (s Schedule) String() string { return durations.Join(s) }

// Attempts is how many attempts a delivery gets: the first, then one per
// delay.
func (s Schedule) Attempts() int { return len(s) + 1 }

// DisableAfter is how long an endpoint may fail, every attempt since its
// last success, before it is disabled.
const DisableAfter = 5 * 24 * time.Hour

// MaxRetryAfter caps what a Retry-After may ask for.
const MaxRetryAfter = 10 * time.Hour

// Class is what an attempt's result means for its delivery.
type Class string

// The classes of an attempt (the attempts_total metric's label).
const (
	Delivered Class = "delivered" // 2xx
	Gone      Class = "gone"      // 410: the endpoint is disabled
	Throttled Class = "throttled" // 429, 502, 503, 504: Retry-After honoured
	Rejected  Class = "rejected"  // any other status, 3xx included
	Broken    Class = "broken"    // no response: connection, timeout
	Blocked   Class = "blocked"   // the address is refused (SSRF)
)

// Classify reads an attempt's status (0: no response).
func Classify(status int) Class {
	switch {
	case status >= 200 && status < 300:
		return Delivered
	case status == http.StatusGone:
		return Gone
	case status == http.StatusTooManyRequests || status == http.StatusBadGateway ||
		status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		return Throttled
	case status == 0:
		return Broken
	}
	return Rejected
}

// Backoff is the delay before attempt n+1 after n attempts (n ≥ 1): the
// schedule's, with up to ±10% jitter so that retries of one outage do not
// arrive together. A Retry-After (retryAfter > 0) of a throttled answer
// replaces it when longer.
func (s Schedule) Backoff(n int, retryAfter time.Duration, rng *rand.Rand) time.Duration {
	d := s[min(max(n, 1), len(s))-1]
	if rng != nil {
		d += time.Duration((rng.Float64()*0.2 - 0.1) * float64(d))
	}
	if retryAfter > d {
		d = min(retryAfter, MaxRetryAfter)
	}
	return d
}

// RetryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (0 when absent or unreadable).
func RetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil {
		if s <= 0 {
			return 0
		}
		return min(time.Duration(s)*time.Second, MaxRetryAfter)
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}
