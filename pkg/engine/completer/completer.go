// Package completer gathers the executor's outcomes into completion
// statements: many payments per statement, across batches, each written
// when the statement is full, a short wait after its first outcome, or the
// earliest held outcome's hold limit, whichever comes first. What to write
// and how is the caller's (write); this package only decides when.
package completer

import "time"

// Outcome is what a completer holds: it says how long it may be held.
type Outcome interface {
	// HoldLimit is the latest time its statement may start: an outcome
	// held past it could outlive its claim's lease.
	HoldLimit() time.Time
}

// Config bounds a statement.
type Config struct {
	// Batch is the most outcomes one statement writes (at least 1).
	Batch int
	// Wait is how long the first outcome of a statement is held for more
	// to join it (0: write what is ready at once).
	Wait time.Duration
}

// Run reads outcomes from in until it is closed, and calls write with
// each statement's outcomes, one statement at a time; held (when not nil)
// is told how many are held or being written, and 0 after each write.
func Run[T Outcome](cfg Config, in <-chan T, write func([]T), held func(int)) {
	buf := make([]T, 0, max(cfg.Batch, 1))
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for t := range in {
		buf = Gather(cfg, in, append(buf[:0], t), timer)
		if held != nil {
			held(len(buf))
		}
		write(buf)
		if held != nil {
			held(0)
		}
	}
}

// Gather adds to buf (holding at least one outcome) what joins it from in
// before its statement must go: when cfg.Batch are held, cfg.Wait after
// the first, or the earliest held outcome's hold limit, whichever is
// first, or in is closed. What is ready at once always joins (it costs no
// wait). timer is stopped, and is left stopped.
func Gather[T Outcome](cfg Config, in <-chan T, buf []T, timer *time.Timer) []T {
	deadline := time.Now().Add(cfg.Wait)
	if l := buf[0].HoldLimit(); l.Before(deadline) {
		deadline = l
	}
	armed := false
	defer func() {
		if armed {
			timer.Stop()
		}
	}()
	for len(buf) < cfg.Batch {
		var t T
		var ok bool
		select {
		case t, ok = <-in:
		default:
			// Nothing ready: wait for the next outcome or the deadline.
			wait := time.Until(deadline)
			if wait <= 0 {
				return buf
			}
			if !armed {
				timer.Reset(wait)
				armed = true
			}
			select {
			case t, ok = <-in:
			case <-timer.C:
				armed = false
				return buf
			}
		}
		if !ok {
			return buf
		}
		buf = append(buf, t)
		if l := t.HoldLimit(); l.Before(deadline) {
			// An earlier deadline: the timer is re-armed for it when
			// the next wait begins.
			deadline = l
			if armed {
				timer.Stop()
				armed = false
			}
		}
	}
	return buf
}
