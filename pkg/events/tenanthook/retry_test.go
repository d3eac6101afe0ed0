package tenanthook

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	for status, want := range map[int]Class{200: Delivered, 204: Delivered, 299: Delivered, 301: Rejected, 307: Rejected,
		400: Rejected, 404: Rejected, 410: Gone, 429: Throttled, 500: Rejected, 502: Throttled, 503: Throttled,
		504: Throttled, 0: Broken} {
		if got := Classify(status); got != want {
			t.Errorf("%d: %s, want %s", status, got, want)
		}
	}
}

func TestRetryAfterAndBackoff(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for h, want := range map[string]time.Duration{"": 0, "120": 2 * time.Minute, "0": 0, "-5": 0, "soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
		"999999999": MaxRetryAfter} {
		if got := RetryAfter(h, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", h, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n, base := range DefaultSchedule {
		d := DefaultSchedule.Backoff(n+1, 0, rng)
		if d < base*9/10 || d > base*11/10 {
			t.Errorf("attempt %d: %s, want %s ±10%%", n+2, d, base)
		}
	}
	// A Retry-After longer than the schedule's wins; a shorter one does not.
	if d := DefaultSchedule.Backoff(1, time.Minute, nil); d != time.Minute {
		t.Errorf("Retry-After 1 min after the first attempt: %s", d)
	}
	if d := DefaultSchedule.Backoff(3, time.Minute, nil); d != 30*time.Minute {
		t.Errorf("Retry-After 1 min against 30 min: %s", d)
	}
	if n := DefaultSchedule.Attempts(); n != 8 {
		t.Errorf("%d attempts, want 8 (immediately, then 7 retries)", n)
	}
}

func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Schedule
	}{
		{"1s,2s, 4s", Schedule{time.Second, 2 * time.Second, 4 * time.Second}},
		{DefaultSchedule.String(), DefaultSchedule},
		{"", nil}, {"1s,,2s", nil}, {"0s", nil}, {"-1s", nil}, {"11h", nil}, {"soon", nil},
		{"1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s", nil},
	} {
		got, err := ParseSchedule(tc.in)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%q: accepted as %v", tc.in, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want.String() {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
