// Package coalesce gathers what trickles in on a channel into one batch:
// after the first item it waits a short linger for more, so a hop sends
// one message (or one statement) for what arrives close together instead
// of one per item. At a steady rate with 5–30 ms gateway latency, "send
// what is ready" sent 1–10 items at a time; each message and each
// statement has a fixed cost that a spike's large batches share and a
// trickle pays per item (docs/PERFORMANCE.md, "Event path v3").
package coalesce

import "time"

// Gather appends first to buf, then whatever arrives on ch until buf holds
// max items, ch is closed, or linger has passed since the call. With
// linger ≤ 0 it takes only what is ready at once (the behaviour without a
// linger). It returns buf and whether ch is still open.
func Gather[T any](buf []T, first T, ch <-chan T, max int, linger time.Duration) ([]T, bool) {
	buf = append(buf, first)
	var t *time.Timer
	for len(buf) < max {
		var it T
		var ok bool
		select {
		case it, ok = <-ch:
		default:
			// What is ready already costs no wait, whatever the linger;
			// the linger starts once nothing is.
			if linger <= 0 {
				return buf, true
			}
			if t == nil {
				t = time.NewTimer(linger)
				defer t.Stop()
			}
			select {
			case it, ok = <-ch:
			case <-t.C:
				return buf, true
			}
		}
		if !ok {
			return buf, false
		}
		buf = append(buf, it)
	}
	return buf, true
}
