// Package retry is the engine's backoff schedule: how long a payment waits
// before its next attempt, and when its budget is spent.
package retry

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// DefaultSchedule is 1m, 5m, 30m, 2h, 12h: five retries, then dead letter.
var DefaultSchedule = Schedule{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 12 * time.Hour}

// Schedule lists the waits before retry 1, 2, ...; its length is the budget.
type Schedule []time.Duration

// Parse reads "1m,5m,30m".
func Parse(s string) (Schedule, error) {
	var out Schedule
	for _, part := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("backoff %q: want positive durations separated by commas", s)
		}
		out = append(out, d)
	}
	return out, nil
}

// String is the flag form.
func (s Schedule) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// Exhausted says whether a payment that has already spent `retries` retries
// may not retry again.
func (s Schedule) Exhausted(retries int32) bool { return int(retries) >= len(s) }

// Delay is the wait before the next retry, with ±20% jitter so a failed
// spike does not come back as one spike.
func (s Schedule) Delay(retries int32) time.Duration {
	i := min(int(retries), len(s)-1)
	d := s[i]
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}
