package sweeper

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPauseAfterAClaim: a full claim goes on at once, a partial one (the
// due rows ran out) waits the cooldown, and an empty one waits for the
// next due time (here unknown: the interval), never the cooldown.
func TestPauseAfterAClaim(t *testing.T) {
	s, err := New(Config{ID: "sweeper-t", Interval: 700 * time.Millisecond, Cooldown: 60 * time.Millisecond, Batch: 10,
		Lease: time.Minute, Executors: []string{"127.0.0.1:1"}, Slots: 2}, nil, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, c := range []struct {
		name             string
		claimed, granted int
		want             time.Duration
	}{
		{"full", 10, 10, 0},
		{"partial", 3, 10, 60 * time.Millisecond},
		{"one of many", 1, 500, 60 * time.Millisecond},
		{"empty", 0, 10, 700 * time.Millisecond},
	} {
		if got := s.pause(c.claimed, c.granted, now); got != c.want {
			t.Errorf("%s: pause %s, want %s", c.name, got, c.want)
		}
	}
}

// TestCooldownIsValidated: a cooldown longer than the idle interval, or
// negative, is refused with the flag's name.
func TestCooldownIsValidated(t *testing.T) {
	for _, cd := range []time.Duration{-time.Millisecond, 2 * time.Second} {
		err := Config{ID: "s", Interval: time.Second, Cooldown: cd, Batch: 1, Lease: time.Minute, Executors: []string{"a:1"}, Slots: 1}.Validate()
		if err == nil {
			t.Errorf("cooldown %s accepted", cd)
		}
	}
}
