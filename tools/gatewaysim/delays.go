package gatewaysim

import (
	"container/heap"
	"context"
	"sync"
	"time"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
)

// delayed is a Charges item waiting out its injected latency: answered at
// at, or at its caller's deadline if that comes first.
type delayed struct {
	arrived      time.Time
	at, deadline time.Time // deadline zero: none
	it           *gatewayv1.ChargeItem
}

// due is when d is answered.
func (d delayed) due() time.Time {
	if !d.deadline.IsZero() && d.deadline.Before(d.at) {
		return d.deadline
	}
	return d.at
}

// delays is one Charges stream's queue of items waiting out their latency,
// earliest first, drained by one goroutine (run) with one timer.
type delays struct {
	mu     sync.Mutex
	h      delayHeap
	closed bool
	wake   chan struct{}
}

func newDelays() *delays { return &delays{wake: make(chan struct{}, 1)} }

func (q *delays) push(d delayed) {
	q.mu.Lock()
	heap.Push(&q.h, d)
	first := q.h[0].it == d.it
	q.mu.Unlock()
	if first {
		q.signal()
	}
}

// close says no more items come; run returns once the queue is empty.
func (q *delays) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *delays) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run calls answer with each item when it falls due, in due order, until
// the queue is closed and empty or ctx ends (the stream is gone: what is
// left is never answered, and handed to abandon).
func (q *delays) run(ctx context.Context, answer, abandon func(delayed)) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var ready []delayed
	for {
		q.mu.Lock()
		now := time.Now()
		ready = ready[:0]
		for len(q.h) > 0 && !q.h[0].due().After(now) {
			ready = append(ready, heap.Pop(&q.h).(delayed))
		}
		var wait time.Duration = -1
		if len(q.h) > 0 {
			wait = q.h[0].due().Sub(now)
		}
		finished := q.closed && len(q.h) == 0
		q.mu.Unlock()
		for _, d := range ready {
			answer(d)
		}
		if finished && len(ready) == 0 {
			return
		}
		if len(ready) > 0 {
			continue // answering took time: look again before sleeping
		}
		if wait >= 0 {
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			q.mu.Lock()
			left := q.h
			q.h = nil
			q.mu.Unlock()
			for _, d := range left {
				abandon(d)
			}
			return
		case <-q.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// delayHeap orders items by when they are answered.
type delayHeap []delayed

func (h delayHeap) Len() int           { return len(h) }
func (h delayHeap) Less(i, j int) bool { return h[i].due().Before(h[j].due()) }
func (h delayHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x any)        { *h = append(*h, x.(delayed)) }
func (h *delayHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}
