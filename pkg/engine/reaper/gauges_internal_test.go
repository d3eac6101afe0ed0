package reaper

import (
	"testing"
	"time"
)

func TestCountDue(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		since time.Duration // since the last count
		took  time.Duration
		first bool
		want  bool
	}{
		{"first count", 0, 0, true, true},
		{"cheap, before the interval", time.Second, time.Millisecond, false, false},
		{"cheap, at the interval", 2 * time.Second, time.Millisecond, false, true},
		{"costly, at the interval", 2 * time.Second, 250 * time.Millisecond, false, false},
		{"costly, at 20 times its cost", 5 * time.Second, 250 * time.Millisecond, false, false},
		{"costly, at 100 times its cost", 25 * time.Second, 250 * time.Millisecond, false, true},
	} {
		last := t0.Add(-tc.since)
		if tc.first {
			last = time.Time{}
		}
		if got := countDue(t0, last, tc.took, 2*time.Second); got != tc.want {
			t.Errorf("%s: countDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}
