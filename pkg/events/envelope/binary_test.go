package envelope

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendTimestampIsAppendFormat: the connector's own timestamp
// formatter writes what time.Time's AppendFormat writes, for instants
// across the calendar (leap days, the turn of centuries, before 1970, every
// fraction of a second from none to all six digits).
func TestAppendTimestampIsAppendFormat(t *testing.T) {
	const layout = "2006-01-02T15:04:05.999999Z"
	check := func(us int64) {
		t.Helper()
		want := time.UnixMicro(us).UTC().AppendFormat(nil, layout)
		if got := appendTimestamp(nil, us); string(got) != string(want) {
			t.Fatalf("%d: got %s, want %s", us, got, want)
		}
	}
	for _, at := range []time.Time{
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(2024, 2, 29, 12, 0, 0, 500000000, time.UTC), time.Date(2100, 3, 1, 0, 0, 0, 10000, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 1000, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(1600, 2, 29, 1, 2, 3, 120000000, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 12, 31, 0, 0, 0, 0, time.UTC),
	} {
		check(at.UnixMicro())
	}
	r := rand.New(rand.NewPCG(1, 2))
	lo, hi := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).UnixMicro()
	for range 200_000 {
		us := lo + r.Int64N(hi-lo)
		switch r.IntN(4) {
		case 0:
			us -= us % 1_000_000 // whole seconds
		case 1:
			us -= us % 1000 // milliseconds
		}
		check(us)
	}
}

func BenchmarkAppendTimestamp(b *testing.B) {
	buf := make([]byte, 0, 64)
	us := time.Date(2026, 12, 4, 16, 30, 1, 123456000, time.UTC).UnixMicro()
	b.Run("own", func(b *testing.B) {
		for range b.N {
			buf = appendTimestamp(buf[:0], us)
		}
	})
	b.Run("AppendFormat", func(b *testing.B) {
		for range b.N {
			buf = time.UnixMicro(us).UTC().AppendFormat(buf[:0], "2006-01-02T15:04:05.999999Z")
		}
	})
}
