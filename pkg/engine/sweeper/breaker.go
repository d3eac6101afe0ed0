package sweeper

import (
	"sync"
	"time"
)

// Breaker stops claiming while the gateway fails. It watches the share of
// attempts that ended without a definitive answer (retryable or ambiguous;
// declines are answers). Closed: claim freely. Open: claim nothing, leaving
// rows PENDING, until the cooldown ends. Half-open: one small probe batch;
// its result closes the breaker or opens it again for twice as long.
type Breaker struct {
	Threshold   float64       // failure share that opens it (0.5)
	MinSamples  int           // attempts needed to judge (50)
	Cooldown    time.Duration // first open period (2s), doubled up to MaxCooldown
	MaxCooldown time.Duration
	ProbeSize   int

	mu       sync.Mutex
	state    int // closed, open, halfOpen
	until    time.Time
	cooldown time.Duration
	ok, bad  int
	probing  bool
}

const (
	closed = iota
	open
	halfOpen
)

// Allow returns how many rows the sweeper may claim now (want when closed,
// ProbeSize for a half-open probe) and whether it is a probe; 0 when open.
func (b *Breaker) Allow(want int, now time.Time) (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case open:
		if now.Before(b.until) {
			return 0, false
		}
		b.state = halfOpen
		fallthrough
	case halfOpen:
		if b.probing {
			return 0, false
		}
		b.probing = true
		return min(want, b.ProbeSize), true
	}
	return want, false
}

// Until is when an open breaker lets a probe through.
func (b *Breaker) Until() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.until
}

// Open reports whether claims are stopped.
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state != closed
}

// Record feeds a batch's results back; probe says it was the half-open probe.
func (b *Breaker) Record(good, failed int, probe bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
		if good+failed > 0 && float64(failed) >= b.Threshold*float64(good+failed) {
			b.trip(now, true)
			return
		}
		b.state, b.ok, b.bad, b.cooldown = closed, 0, 0, 0
		return
	}
	if b.state != closed {
		return
	}
	b.ok += good
	b.bad += failed
	total := b.ok + b.bad
	if total >= b.MinSamples {
		if float64(b.bad) >= b.Threshold*float64(total) {
			b.trip(now, false)
			return
		}
		// A sliding-ish window: halve the counts so old results fade.
		b.ok, b.bad = b.ok/2, b.bad/2
	}
}

// Abort ends a probe that produced no result (nothing was due, or the
// dispatch failed) so the next one can run.
func (b *Breaker) Abort(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *Breaker) trip(now time.Time, again bool) {
	switch {
	case !again || b.cooldown == 0:
		b.cooldown = b.Cooldown
	default:
		b.cooldown = min(2*b.cooldown, b.MaxCooldown)
	}
	b.state, b.until, b.ok, b.bad = open, now.Add(b.cooldown), 0, 0
}
