package coalesce

import (
	"testing"
	"time"
)

// TestGatherWaitsForWhatTrickles: an item arriving within the linger joins
// the batch (without the linger it would be left for the next one).
func TestGatherWaitsForWhatTrickles(t *testing.T) {
	ch := make(chan int, 4)
	go func() {
		time.Sleep(50 * time.Millisecond)
		ch <- 2
	}()
	start := time.Now()
	got, open := Gather(nil, 1, ch, 2, 10*time.Second)
	if len(got) != 2 || !open {
		t.Fatalf("gathered %v (open %v), want the item that came 50 ms later within a 10 s linger", got, open)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("waited %s: a full batch must not wait out the linger", d)
	}
}

// TestGatherIsBoundedByTheLinger: nothing more arriving, the batch goes
// after the linger, not later.
func TestGatherIsBoundedByTheLinger(t *testing.T) {
	ch := make(chan int)
	start := time.Now()
	got, open := Gather(nil, 1, ch, 100, 20*time.Millisecond)
	if d := time.Since(start); d < 20*time.Millisecond || d > 5*time.Second {
		t.Fatalf("returned after %s, want the 20 ms linger", d)
	}
	if len(got) != 1 || !open {
		t.Fatalf("got %v open=%v", got, open)
	}
}

// TestGatherTakesWhatIsReadyWithoutALinger: linger 0 is "send what is
// ready" and never waits.
func TestGatherTakesWhatIsReadyWithoutALinger(t *testing.T) {
	ch := make(chan int, 8)
	for i := 2; i <= 5; i++ {
		ch <- i
	}
	got, _ := Gather(nil, 1, ch, 3, 0)
	if len(got) != 3 {
		t.Fatalf("got %v, want 3 (max)", got)
	}
	got, _ = Gather(got[:0], 0, ch, 100, 0)
	if len(got) != 3 { // 0, 4, 5
		t.Fatalf("got %v, want the first and the two left", got)
	}
	close(ch)
	got, open := Gather(nil, 9, ch, 100, time.Hour)
	if open || len(got) != 1 {
		t.Fatalf("closed channel: got %v open=%v", got, open)
	}
}
