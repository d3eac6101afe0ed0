package payment

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/paysched/paysched/pkg/platform/durations"
)

// DefaultBackoff is 1m, 5m, 30m, 2h, 12h: five retries, then dead letter.
var DefaultBackoff = Backoff{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 12 * time.Hour}

// Backoff is the retry budget rule, the one place that decides it: the
// waits before retry 1, 2, ...; its length is the budget. Only the
// executor applies it (pkg/engine/executor); the reaper counts an expired
// lease as a spent retry and leaves the decision to the next attempt.
type Backoff []time.Duration

// ParseBackoff reads "1m,5m,30m".
func ParseBackoff(s string) (Backoff, error) {
	ds, err := durations.Parse(s, 0)
	if err != nil {
		return nil, fmt.Errorf("backoff %w", err)
	}
	return ds, nil
}

// String is the flag form.
func (b Backoff) String() string { return durations.Join(b) }

// Exhausted says whether a payment that has already spent retries retries
// may not retry again after this attempt fails.
func (b Backoff) Exhausted(retries int32) bool { return int(retries) >= len(b) }

// Spent says whether a claimed payment may not be attempted at all: expired
// leases (the reaper counts each as a retry) spent the last of its budget.
func (b Backoff) Spent(retries int32) bool { return int(retries) > len(b) }

// Delay is the wait before the next retry, with ±20% jitter so a failed
// spike does not come back as one spike.
func (b Backoff) Delay(retries int32) time.Duration {
	i := min(int(retries), len(b)-1)
	d := b[i]
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}
