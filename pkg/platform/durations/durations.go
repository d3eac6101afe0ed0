// Package durations reads and writes lists of delays in their flag form,
// "1m,5m,30m": the executor's retry backoff and the webhook dispatcher's
// retry schedule are both such lists, and both flags read them alike.
package durations

import (
	"fmt"
	"strings"
	"time"
)

// Parse reads s, positive durations separated by commas (spaces around
// each allowed), each at most max (0: no bound). An empty s, an empty
// element or any other duration is refused, with s quoted.
func Parse(s string, max time.Duration) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 || (max > 0 && d > max) {
			if max > 0 {
				return nil, fmt.Errorf("%q: want positive durations up to %s, separated by commas", s, max)
			}
			return nil, fmt.Errorf("%q: want positive durations separated by commas", s)
		}
		out = append(out, d)
	}
	return out, nil
}

// Join is ds in the form Parse reads.
func Join(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}
