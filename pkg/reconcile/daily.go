package reconcile

import (
	"context"
	"fmt"
	"time"
)

// ParseTimeOfDay reads "HH:MM" (UTC) as an offset from midnight.
func ParseTimeOfDay(s string) (time.Duration, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, fmt.Errorf("time of day %q: want HH:MM (UTC)", s)
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// NextRun is the first instant after now at offset at into a UTC day.
func NextRun(now time.Time, at time.Duration) time.Time {
	next := Day(now).Add(at)
	if !next.After(now) {
		next = next.AddDate(0, 0, 1)
	}
	return next
}

// Daily reconciles the previous UTC day every day at offset at, until ctx
// ends. A failed run is retried after retry (the run row records why).
func (r *Runner) Daily(ctx context.Context, at, retry time.Duration) error {
	for {
		next := NextRun(time.Now(), at)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		day := Day(next).AddDate(0, 0, -1)
		for {
			if _, err := r.Run(ctx, day, "schedule"); err == nil || ctx.Err() != nil {
				break
			} else {
				r.log().Error("daily reconciliation failed", "day", day.Format(time.DateOnly), "err", err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retry):
			}
		}
	}
}
