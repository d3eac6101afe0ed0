package sweeper

import (
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The executors behind a name change (a rollout, an autoscaler): after a
// refresh the sweeper's slots are exactly the new executors', and a gone
// executor's slots are dropped.
func TestRefreshFollowsDNS(t *testing.T) {
	var mu sync.Mutex
	ips := []string{"10.0.0.1", "10.0.0.2"}
	lookup := func(host string) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if host != "executor" {
			t.Fatalf("looked up %q", host)
		}
		return append([]string(nil), ips...), nil
	}
	s, err := New(Config{ID: "sweeper-t", Interval: time.Second, Batch: 10, Lease: time.Minute, Executors: []string{"executor:9100"}, Slots: 2, Lookup: lookup}, nil, prometheus.NewRegistry(),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	free := func() []string {
		// Every current executor, once per batch of credits it has.
		var got []string
		s.mu.Lock()
		for _, e := range s.execs {
			if e.gone.Load() {
				continue
			}
			for range e.free.Load() / int64(s.cfg.Batch) {
				got = append(got, e.addr)
			}
		}
		s.mu.Unlock()
		sort.Strings(got)
		return got
	}
	if got := free(); len(got) != 4 || got[0] != "10.0.0.1:9100" || got[3] != "10.0.0.2:9100" {
		t.Fatalf("credits at start: %v", got)
	}
	mu.Lock()
	ips = []string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}
	mu.Unlock()
	s.refresh()
	want := []string{"10.0.0.2:9100", "10.0.0.2:9100", "10.0.0.3:9100", "10.0.0.3:9100", "10.0.0.4:9100", "10.0.0.4:9100"}
	if got := free(); len(got) != len(want) || got[0] != want[0] || got[5] != want[5] || got[2] != want[2] {
		t.Fatalf("credits after the change: %v, want %v", got, want)
	}
	// A failed lookup keeps the current set.
	mu.Lock()
	ips = nil
	mu.Unlock()
	s.refresh()
	if got := free(); len(got) != 6 {
		t.Fatalf("a failed lookup changed the credits: %v", got)
	}
	for _, e := range s.execs {
		_ = e.cc.Close()
	}
}
