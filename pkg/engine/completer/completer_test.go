package completer_test

import (
	"sync"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/engine/completer"
)

// task is an outcome whose hold limit is its lease's end less a second.
type task struct{ leaseEnd time.Time }

func (t *task) HoldLimit() time.Time { return t.leaseEnd.Add(-time.Second) }

// gatherer is a completer's configuration and input.
type gatherer struct {
	cfg  completer.Config
	done chan *task
}

func newGatherer(wait time.Duration, batch int) *gatherer {
	return &gatherer{cfg: completer.Config{Wait: wait, Batch: batch}, done: make(chan *task, 16)}
}

func (g *gatherer) gather(buf []*task, timer *time.Timer) []*task {
	return completer.Gather(g.cfg, g.done, buf, timer)
}

func stopped() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// TestHeldOutcomeNeverOutlivesItsLease: a completer holding outcomes for
// more to join writes them by the earliest held call's deadline (lease
// end less margin), however long --complete-wait is: with a wait of an
// hour, an outcome whose lease ends in 1.5 s goes within ~0.5 s, and one
// already past its deadline at once. Without the bound each would wait the
// hour, past its lease, where the reaper takes it back and the write is
// fenced out.
func TestHeldOutcomeNeverOutlivesItsLease(t *testing.T) {
	s := newGatherer(time.Hour, 1000)
	start := time.Now()
	got := s.gather([]*task{{leaseEnd: start.Add(1500 * time.Millisecond)}}, stopped())
	if d := time.Since(start); len(got) != 1 || d > 30*time.Second {
		t.Fatalf("held %d outcomes for %s: the lease bound (~0.5 s) was not kept", len(got), d)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("wrote after %s, before the bound: nothing held", d)
	}
	// A later outcome with an earlier lease end pulls the write forward.
	s = newGatherer(time.Hour, 1000)
	go func() {
		time.Sleep(100 * time.Millisecond)
		s.done <- &task{leaseEnd: time.Now().Add(time.Second)} // due to go at once: its deadline is now
	}()
	start = time.Now()
	got = s.gather([]*task{{leaseEnd: start.Add(time.Hour)}}, stopped())
	if d := time.Since(start); len(got) != 2 || d > 30*time.Second {
		t.Fatalf("held %d outcomes for %s: the second's lease bound was not kept", len(got), d)
	}
}

// TestCompleteWaitBoundsTheHold: with leases far off, the outcomes go
// --complete-wait after the first, whether or not --complete-batch are
// ready; and once --complete-batch are ready they go without waiting.
func TestCompleteWaitBoundsTheHold(t *testing.T) {
	far := time.Now().Add(time.Hour)
	s := newGatherer(50*time.Millisecond, 1000)
	start := time.Now()
	got := s.gather([]*task{{leaseEnd: far}}, stopped())
	if d := time.Since(start); len(got) != 1 || d < 50*time.Millisecond || d > 30*time.Second {
		t.Fatalf("held %d outcomes for %s, want one for the 50 ms wait", len(got), d)
	}
	// What trickles in within the wait joins the statement.
	s = newGatherer(2*time.Second, 1000)
	go func() {
		for range 3 {
			time.Sleep(20 * time.Millisecond)
			s.done <- &task{leaseEnd: far}
		}
	}()
	got = s.gather([]*task{{leaseEnd: far}}, stopped())
	if len(got) != 4 {
		// It waits the 2 s out: the three came within the wait.
		t.Fatalf("gathered %d outcomes, want the 4 that came within the wait", len(got))
	}
	// A full statement does not wait.
	s = newGatherer(time.Hour, 3)
	s.done <- &task{leaseEnd: far}
	s.done <- &task{leaseEnd: far}
	start = time.Now()
	got = s.gather([]*task{{leaseEnd: far}}, stopped())
	if d := time.Since(start); len(got) != 3 || d > 30*time.Second {
		t.Fatalf("gathered %d outcomes in %s: a full batch must go at once", len(got), d)
	}
}

// TestRunWritesEveryOutcomeOnce: many goroutines hand outcomes to three
// completers at once; every outcome is written exactly once, no statement
// is larger than the batch, and Run returns when its input closes.
func TestRunWritesEveryOutcomeOnce(t *testing.T) {
	const n, senders = 5000, 16
	in := make(chan *task)
	var mu sync.Mutex
	seen := map[*task]int{}
	write := func(b []*task) {
		if len(b) > 64 {
			t.Errorf("a statement of %d outcomes, batch 64", len(b))
		}
		mu.Lock()
		for _, x := range b {
			seen[x]++
		}
		mu.Unlock()
	}
	var run sync.WaitGroup
	for range 3 {
		run.Go(func() { completer.Run(completer.Config{Batch: 64, Wait: time.Millisecond}, in, write, nil) })
	}
	var send sync.WaitGroup
	far := time.Now().Add(time.Hour)
	for range senders {
		send.Go(func() {
			for range n / senders {
				in <- &task{leaseEnd: far}
			}
		})
	}
	send.Wait()
	close(in)
	run.Wait()
	if len(seen) != n/senders*senders {
		t.Fatalf("%d outcomes written, want %d", len(seen), n/senders*senders)
	}
	for _, c := range seen {
		if c != 1 {
			t.Fatalf("an outcome written %d times", c)
		}
	}
}
