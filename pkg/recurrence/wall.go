package recurrence

import (
	"fmt"
	"time"
)

// Wall is a local date and time without a zone, as a wall clock in the
// plan's zone shows it: a plan's start and an occurrence's nominal time.
type Wall struct {
	Year              int
	Month             time.Month
	Day               int
	Hour, Min, Second int
}

// WallOf is t's date and clock as t's own location shows them.
func WallOf(t time.Time) Wall {
	y, m, d := t.Date()
	return Wall{Year: y, Month: m, Day: d, Hour: t.Hour(), Min: t.Minute(), Second: t.Second()}
}

// ParseWall reads "2006-01-02T15:04:05" (or "2006-01-02T15:04", or a date
// alone, at midnight).
func ParseWall(s string) (Wall, error) {
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return WallOf(t), nil
		}
	}
	return Wall{}, fmt.Errorf("local time %q: want YYYY-MM-DDTHH:MM[:SS], without a zone or offset", s)
}

// String is w as "2006-01-02T15:04:05": an occurrence's key beside its
// plan's id.
func (w Wall) String() string {
	return fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d", w.Year, w.Month, w.Day, w.Hour, w.Min, w.Second)
}

// Compact is w as RFC 5545 writes a local date-time: 20060102T150405.
func (w Wall) Compact() string {
	return fmt.Sprintf("%04d%02d%02dT%02d%02d%02d", w.Year, w.Month, w.Day, w.Hour, w.Min, w.Second)
}

// utc is w read as if it were UTC: arithmetic on dates without a zone's
// transitions.
func (w Wall) utc() time.Time {
	return time.Date(w.Year, w.Month, w.Day, w.Hour, w.Min, w.Second, 0, time.UTC)
}

// Before says w is earlier than o on the same wall clock.
func (w Wall) Before(o Wall) bool { return w.utc().Before(o.utc()) }

// onDay is w's clock on day d (a UTC midnight).
func (w Wall) onDay(d time.Time) Wall {
	return Wall{Year: d.Year(), Month: d.Month(), Day: d.Day(), Hour: w.Hour, Min: w.Min, Second: w.Second}
}

// date is w's day as a UTC midnight.
func (w Wall) date() time.Time { return time.Date(w.Year, w.Month, w.Day, 0, 0, 0, 0, time.UTC) }

// Valid says w names a real calendar date and clock.
func (w Wall) Valid() bool {
	t := w.utc()
	return w.Month >= 1 && w.Month <= 12 && w.Hour >= 0 && w.Hour < 24 && w.Min >= 0 && w.Min < 60 &&
		w.Second >= 0 && w.Second < 60 && t.Day() == w.Day && t.Month() == w.Month && t.Year() == w.Year
}

// ZoneShift is how Instant placed a wall clock the zone's transitions
// make missing or double.
type ZoneShift int

// How a wall clock met the zone's transitions.
const (
	// Exact: the clock exists once in the zone.
	Exact ZoneShift = iota
	// Gap: the clock falls in a spring-forward gap and is moved forward by
	// the gap's length (02:30 on a 1-hour gap is 03:30; on Lord Howe's
	// 30-minute gap, 02:15 is 02:45).
	Gap
	// Overlap: the clock exists twice (fall back) and the first instant is
	// taken (01:30 in the daylight-saving offset, not the standard one).
	Overlap
)

// Instant is the instant w names in loc, with how it met a transition:
// in a gap it moves forward by the gap, in an overlap the first of the
// two instants is taken. Go's time.Date leaves both cases unspecified, so
// they are decided here from the offsets either side.
func Instant(w Wall, loc *time.Location) (time.Time, ZoneShift) {
	naive := w.utc()
	// The offsets in force around the clock: a transition is never within
	// a day of another.
	var offsets []int
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := naive.Add(probe).In(loc).Zone()
		if len(offsets) == 0 || offsets[len(offsets)-1] != off {
			offsets = append(offsets, off)
		}
	}
	var found []time.Time
	for _, off := range offsets {
		t := naive.Add(-time.Duration(off) * time.Second).In(loc)
		if WallOf(t) == w {
			found = append(found, t)
		}
	}
	switch len(found) {
	case 0:
		// In the gap: read the clock with the offset before the transition,
		// which lands it as far past the gap's end as it was past its start.
		return naive.Add(-time.Duration(offsets[0]) * time.Second).In(loc), Gap
	case 1:
		return found[0], Exact
	default:
		first := found[0]
		for _, t := range found[1:] {
			if t.Before(first) {
				first = t
			}
		}
		return first, Overlap
	}
}
