package executor

import (
	"sync"
	"time"
)

// payeePacer paces charges per payee (a PSP limits each connected account
// on its own), in this executor: a GCRA per payee. A payment over its
// payee's rate is not charged now; it is given the time its turn comes,
// and the executor hands it back to PENDING with run_at at that time, so it
// waits without holding a lease. Each reservation moves the payee's
// theoretical arrival time on, so payments deferred together are spread at
// the rate instead of all coming back at once; a payment that comes back
// at its turn is charged on that turn, not given another.
type payeePacer struct {
	rate     float64 // charges per second per payee
	burst    float64
	mu       sync.Mutex
	tat      map[string]time.Time // theoretical arrival time, per payee
	reserved map[string]time.Time // the turn each deferred payment holds
	swept    time.Time
}

// maxPayees bounds the map: past it, payees whose pace has fully
// recovered (their entry says nothing) are dropped.
const maxPayees = 100_000

func newPayeePacer(rate float64, burst int) *payeePacer {
	if rate <= 0 {
		return nil
	}
	return &payeePacer{rate: rate, burst: float64(max(burst, 1)), tat: map[string]time.Time{}, reserved: map[string]time.Time{}}
}

// turnSlack is how early a deferred payment may come back and still take
// its turn (the database's clock claims it).
const turnSlack = 50 * time.Millisecond

// take returns payment id's turn to charge payee: now or earlier means
// charge now; later means come back then (the turn is kept for it).
func (p *payeePacer) take(id, payee string, now time.Time) time.Time {
	if p == nil {
		return now
	}
	interval := time.Duration(float64(time.Second) / p.rate)
	window := time.Duration(p.burst * float64(interval))
	p.mu.Lock()
	defer p.mu.Unlock()
	if turn, ok := p.reserved[id]; ok {
		if now.Add(turnSlack).Before(turn) {
			return turn
		}
		delete(p.reserved, id)
		return now
	}
	if (len(p.tat) > maxPayees || len(p.reserved) > maxPayees) && now.Sub(p.swept) > time.Second {
		for k, t := range p.tat {
			if !t.After(now) {
				delete(p.tat, k)
			}
		}
		// A turn not taken a minute after it came: the payment went to
		// another executor, or was cancelled.
		for k, t := range p.reserved {
			if now.Sub(t) > time.Minute {
				delete(p.reserved, k)
			}
		}
		p.swept = now
	}
	tat := p.tat[payee]
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(interval)
	p.tat[payee] = tat
	// Allowed now while the reservations ahead fit in the burst window.
	turn := tat.Add(-window)
	if !turn.After(now) {
		return now
	}
	p.reserved[id] = turn
	return turn
}
