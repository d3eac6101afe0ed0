package audit

import (
	"context"
	"time"

	"github.com/paysched/paysched/pkg/store"
)

// yieldCheckEvery is how often a held-back batch asks again, and how long
// an answer is reused.
const yieldCheckEvery = 500 * time.Millisecond

// yield holds a batch's audit rows back while the engine is behind on due
// payments by a real backlog (the oldest unclaimed payment more than
// Backlog late: a spike, not a payment a moment late), for at most
// MaxDefer after the batch's oldest change committed. During a due-time
// spike Postgres has no idle CPU: every audit row written then is taken
// from the payments being executed. Held back, the rows are written once
// the spike is claimed (or the bound is reached), from Kafka, where they
// are safe meanwhile: offsets are not committed. Notifications never wait
// for it: they are published as soon as their change is read.
func (c *Consumer) yield(ctx context.Context, b *batch) error {
	if c.maxDefer <= 0 || len(b.rows) == 0 {
		return nil
	}
	until := time.UnixMilli(b.oldestMs).Add(c.maxDefer)
	for time.Now().Before(until) && c.engineBehind(ctx) {
		// The check itself may have taken until past the bound (a timed-out
		// query during a spike): the wait is taken after it, and only a
		// positive one is waited and counted.
		wait := min(yieldCheckEvery, time.Until(until))
		if wait <= 0 {
			return nil
		}
		start := time.Now()
		c.m.holding.Set(1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			c.m.holding.Set(0)
			return ctx.Err()
		case <-t.C:
		}
		c.m.deferred.Add(time.Since(start).Seconds())
	}
	c.m.holding.Set(0)
	return nil
}

// engineBehind asks store.Overdue, reusing an answer for yieldCheckEvery. An
// error counts as not behind: the audit log is never held back on a guess.
func (c *Consumer) engineBehind(ctx context.Context) bool {
	if time.Since(c.behindAt) < yieldCheckEvery {
		return c.behind
	}
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	overdue := c.overdue
	if overdue == nil {
		overdue = store.Overdue
	}
	behind, err := overdue(qctx, c.db, c.backlog)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("check for overdue payments", "err", err)
		}
		behind = false
	}
	c.behind, c.behindAt = behind, time.Now()
	return behind
}
