package sweeper

import (
	"testing"
	"time"
)

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	b := &Breaker{Threshold: 0.5, MinSamples: 10, Cooldown: time.Second, MaxCooldown: 4 * time.Second, ProbeSize: 3}
	now := time.Unix(1000, 0)
	if n, probe := b.Allow(100, now); n != 100 || probe {
		t.Fatalf("closed: %d %v", n, probe)
	}
	b.Record(2, 8, false, now) // 80% failures over 10 samples: open
	if n, _ := b.Allow(100, now.Add(500*time.Millisecond)); n != 0 {
		t.Fatalf("open breaker allowed %d", n)
	}
	n, probe := b.Allow(100, now.Add(1100*time.Millisecond))
	if n != 3 || !probe {
		t.Fatalf("half-open: %d %v, want a probe of 3", n, probe)
	}
	if n, _ := b.Allow(100, now.Add(1100*time.Millisecond)); n != 0 {
		t.Fatal("a second probe ran while the first was in flight")
	}
	b.Record(0, 3, true, now.Add(1200*time.Millisecond)) // probe failed: open twice as long
	if n, _ := b.Allow(100, now.Add(2300*time.Millisecond)); n != 0 {
		t.Fatal("reopened breaker should wait 2 s")
	}
	if n, probe := b.Allow(100, now.Add(3300*time.Millisecond)); n != 3 || !probe {
		t.Fatalf("second probe: %d %v", n, probe)
	}
	b.Record(3, 0, true, now.Add(3400*time.Millisecond))
	if n, probe := b.Allow(100, now.Add(3500*time.Millisecond)); n != 100 || probe {
		t.Fatalf("closed again: %d %v", n, probe)
	}
	// Declines are answers, not failures: a mostly-succeeding window stays closed.
	b.Record(9, 1, false, now.Add(4*time.Second))
	if b.Open() {
		t.Fatal("10% failures opened the breaker")
	}
}

func TestBreakerAbortFreesTheProbe(t *testing.T) {
	b := &Breaker{Threshold: 0.5, MinSamples: 1, Cooldown: time.Millisecond, MaxCooldown: time.Second, ProbeSize: 1}
	now := time.Unix(0, 0)
	b.Record(0, 1, false, now)
	_, probe := b.Allow(10, now.Add(time.Second))
	b.Abort(probe) // nothing was due
	if n, probe := b.Allow(10, now.Add(time.Second)); n != 1 || !probe {
		t.Fatalf("after abort: %d %v", n, probe)
	}
}
