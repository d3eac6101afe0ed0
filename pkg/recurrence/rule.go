// Package recurrence expands a payment plan into its occurrences: an RFC
// 5545 RRULE subset from a local start in an IANA zone, a month-end policy,
// a business-day convention on a holiday calendar, and the time-zone rules
// for gaps and overlaps. It is pure: no clock and no database; a planner
// asks it for the occurrences of a window. docs/DESIGN.md, "Recurring
// schedules", has the rules as tables of examples.
package recurrence

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Freq is a rule's FREQ.
type Freq int

// The frequencies of the subset.
const (
	Daily Freq = iota + 1
	Weekly
	Monthly
	Yearly
)

var freqNames = map[Freq]string{Daily: "DAILY", Weekly: "WEEKLY", Monthly: "MONTHLY", Yearly: "YEARLY"}

// String is f as RRULE spells it.
func (f Freq) String() string { return freqNames[f] }

// WeekdayNum is one BYDAY entry: a weekday, and with N != 0 its N-th
// occurrence in the month (or the year) from the start, or from the end
// when negative (-1FR: the last Friday).
type WeekdayNum struct {
	N   int
	Day time.Weekday
}

var dayNames = [...]string{"SU", "MO", "TU", "WE", "TH", "FR", "SA"}

// String is w as BYDAY spells it (MO, -1FR).
func (w WeekdayNum) String() string {
	if w.N == 0 {
		return dayNames[w.Day]
	}
	return strconv.Itoa(w.N) + dayNames[w.Day]
}

// Rule is the RRULE subset: FREQ, INTERVAL, BYDAY, BYMONTHDAY, BYMONTH,
// COUNT and UNTIL. Weeks start on Monday (WKST=MO). The time of day is
// the start's (no BYHOUR), and there is no BYSETPOS, BYWEEKNO or
// BYYEARDAY.
type Rule struct {
	Freq     Freq
	Interval int // 1 when 0
	ByDay    []WeekdayNum
	// ByMonthDay days of the month, 1 to 31 or -1 (the last) to -31.
	ByMonthDay []int
	ByMonth    []time.Month
	// Count ends the rule after that many occurrences (0: no count).
	Count int
	// Until ends the rule after the last occurrence at or before it, a
	// local date and time (nil: no end).
	Until *Wall
}

// ErrRule wraps every reason a rule is refused.
var ErrRule = errors.New("recurrence rule")

func ruleErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRule, fmt.Sprintf(format, args...))
}

// ParseRule reads an RRULE value such as "FREQ=MONTHLY;BYDAY=-1FR;COUNT=12"
// (an "RRULE:" prefix is allowed). UNTIL is a local date
// (20270131) or date and time (20270131T090000), compared with the
// occurrences' nominal local times; a UTC form (…Z) is refused, since the
// plan's zone decides.
func ParseRule(s string) (Rule, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "RRULE:")
	if s == "" {
		return Rule{}, ruleErr("empty")
	}
	var r Rule
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(part, "=")
		k = strings.ToUpper(strings.TrimSpace(k))
		if !ok || v == "" {
			return Rule{}, ruleErr("%q is not NAME=VALUE", part)
		}
		if seen[k] {
			return Rule{}, ruleErr("%s given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "FREQ":
			r.Freq, err = parseFreq(v)
		case "INTERVAL":
			r.Interval, err = parseInt(k, v, 1, 1000)
		case "COUNT":
			r.Count, err = parseInt(k, v, 1, 100000)
		case "UNTIL":
			var w Wall
			w, err = parseUntil(v)
			r.Until = &w
		case "BYDAY":
			r.ByDay, err = parseByDay(v)
		case "BYMONTHDAY":
			r.ByMonthDay, err = parseList(k, v, -31, 31)
		case "BYMONTH":
			var ms []int
			ms, err = parseList(k, v, 1, 12)
			for _, m := range ms {
				r.ByMonth = append(r.ByMonth, time.Month(m))
			}
		case "WKST":
			if strings.ToUpper(v) != "MO" {
				err = ruleErr("WKST=%s: weeks start on Monday (WKST=MO)", v)
			}
		default:
			err = ruleErr("%s is not supported (FREQ, INTERVAL, BYDAY, BYMONTHDAY, BYMONTH, COUNT, UNTIL)", k)
		}
		if err != nil {
			return Rule{}, err
		}
	}
	if err := r.Validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// Validate reports the first reason r cannot be expanded.
func (r Rule) Validate() error {
	switch {
	case r.Freq < Daily || r.Freq > Yearly:
		return ruleErr("FREQ must be DAILY, WEEKLY, MONTHLY or YEARLY")
	case r.Interval < 0:
		return ruleErr("INTERVAL must be positive")
	case r.Count < 0:
		return ruleErr("COUNT must be positive")
	case r.Count > 0 && r.Until != nil:
		return ruleErr("COUNT and UNTIL together: RFC 5545 allows one")
	}
	for _, d := range r.ByMonthDay {
		if d == 0 || d < -31 || d > 31 {
			return ruleErr("BYMONTHDAY %d: want 1 to 31 or -1 to -31", d)
		}
	}
	ordinals := 0
	for _, d := range r.ByDay {
		if d.N == 0 {
			continue
		}
		ordinals++
		if r.Freq != Monthly && r.Freq != Yearly {
			return ruleErr("BYDAY %s: an ordinal needs FREQ=MONTHLY or YEARLY", d)
		}
		if limit := ordinalLimit(r); d.N < -limit || d.N > limit {
			return ruleErr("BYDAY %s: the ordinal must be within ±%d", d, limit)
		}
	}
	if ordinals > 0 && ordinals < len(r.ByDay) {
		// RFC 5545 reads a list as a union; python-dateutil and the npm
		// rrule package (its port) take the plain days as a filter of the
		// ordinal ones. Money does not ride on a reading.
		return ruleErr("BYDAY mixes ordinal days (2WE) with plain ones (FR), which implementations read differently: make two schedules")
	}
	return nil
}

func ordinalLimit(r Rule) int {
	if r.Freq == Yearly && len(r.ByMonth) == 0 {
		return 53
	}
	return 5
}

// String is r as an RRULE value, ParseRule's inverse.
func (r Rule) String() string {
	parts := []string{"FREQ=" + r.Freq.String()}
	if r.Interval > 1 {
		parts = append(parts, "INTERVAL="+strconv.Itoa(r.Interval))
	}
	if len(r.ByMonth) > 0 {
		var ms []string
		for _, m := range r.ByMonth {
			ms = append(ms, strconv.Itoa(int(m)))
		}
		parts = append(parts, "BYMONTH="+strings.Join(ms, ","))
	}
	if len(r.ByMonthDay) > 0 {
		var ds []string
		for _, d := range r.ByMonthDay {
			ds = append(ds, strconv.Itoa(d))
		}
		parts = append(parts, "BYMONTHDAY="+strings.Join(ds, ","))
	}
	if len(r.ByDay) > 0 {
		var ds []string
		for _, d := range r.ByDay {
			ds = append(ds, d.String())
		}
		parts = append(parts, "BYDAY="+strings.Join(ds, ","))
	}
	if r.Count > 0 {
		parts = append(parts, "COUNT="+strconv.Itoa(r.Count))
	}
	if r.Until != nil {
		parts = append(parts, "UNTIL="+r.Until.Compact())
	}
	return strings.Join(parts, ";")
}

func parseFreq(v string) (Freq, error) {
	for f, n := range freqNames {
		if strings.EqualFold(v, n) {
			return f, nil
		}
	}
	return 0, ruleErr("FREQ=%s: want DAILY, WEEKLY, MONTHLY or YEARLY", v)
}

func parseInt(k, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, ruleErr("%s=%s: want a whole number from %d to %d", k, v, lo, hi)
	}
	return n, nil
}

func parseList(k, v string, lo, hi int) ([]int, error) {
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < lo || n > hi || n == 0 {
			return nil, ruleErr("%s value %q: want %d to %d, not 0", k, s, lo, hi)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func parseByDay(v string) ([]WeekdayNum, error) {
	var out []WeekdayNum
	for _, s := range strings.Split(v, ",") {
		s = strings.ToUpper(strings.TrimSpace(s))
		if len(s) < 2 {
			return nil, ruleErr("BYDAY value %q", s)
		}
		day := slices.Index(dayNames[:], s[len(s)-2:])
		if day < 0 {
			return nil, ruleErr("BYDAY value %q: want MO, TU, WE, TH, FR, SA or SU, with an optional ordinal (-1FR)", s)
		}
		n := 0
		if num := s[:len(s)-2]; num != "" {
			var err error
			if n, err = strconv.Atoi(strings.TrimPrefix(num, "+")); err != nil || n == 0 {
				return nil, ruleErr("BYDAY value %q: the ordinal must be a non-zero number", s)
			}
		}
		w := WeekdayNum{N: n, Day: time.Weekday(day)}
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out, nil
}

func parseUntil(v string) (Wall, error) {
	if strings.HasSuffix(strings.ToUpper(v), "Z") {
		return Wall{}, ruleErr("UNTIL=%s: give it in the plan's local time, without Z", v)
	}
	for _, layout := range []string{"20060102T150405", "20060102"} {
		if t, err := time.Parse(layout, v); err == nil {
			return WallOf(t), nil
		}
	}
	return Wall{}, ruleErr("UNTIL=%s: want YYYYMMDD or YYYYMMDDTHHMMSS", v)
}
