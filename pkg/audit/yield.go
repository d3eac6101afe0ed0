package audit

import (
	"context"
	"time"
)

// overdueSQL asks whether the engine is behind: a payment due more than a
// second ago that no sweeper has claimed yet. It reads the sweep's own
// partial index (PENDING rows by run_at) and stops at the first row: an
// index probe, a few milliseconds during a spike while the index still
// holds the rows just claimed. "due_time <= now()" prunes the days not
// begun, as the claim does.
const overdueSQL = `
SELECT EXISTS (
    SELECT 1 FROM payments
    WHERE status = 'PENDING' AND run_at <= now() - interval '1 second' AND due_time <= now())`

// yieldCheckEvery is how often a held-back batch asks again, and how long
// an answer is reused.
const yieldCheckEvery = 500 * time.Millisecond

// yield holds a batch back while the engine is behind on due payments, for
// at most MaxDefer after the batch's oldest change committed. During a
// due-time spike Postgres has no idle CPU: every audit row written then is
// taken from the payments being executed. Held back, the rows are written
// once the spike is claimed (or the bound is reached), from Kafka, where
// they are safe meanwhile: offsets are not committed. Notifications wait
// with them, as they follow the write.
func (c *Consumer) yield(ctx context.Context, b *batch) error {
	if c.maxDefer <= 0 || len(b.rows) == 0 {
		return nil
	}
	until := time.UnixMilli(b.oldestMs).Add(c.maxDefer)
	for time.Now().Before(until) && c.engineBehind(ctx) {
		wait := min(yieldCheckEvery, time.Until(until))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		c.m.deferred.Add(wait.Seconds())
	}
	return nil
}

// engineBehind runs overdueSQL, reusing an answer for yieldCheckEvery. An
// error counts as not behind: the audit log is never held back on a guess.
func (c *Consumer) engineBehind(ctx context.Context) bool {
	if time.Since(c.behindAt) < yieldCheckEvery {
		return c.behind
	}
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var behind bool
	if err := c.db.QueryRow(qctx, overdueSQL).Scan(&behind); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("check for overdue payments", "err", err)
		}
		behind = false
	}
	c.behind, c.behindAt = behind, time.Now()
	return behind
}
