package recurrence

import (
	"fmt"
	"slices"
	"time"
)

// MonthEnd says what a day the month lacks becomes (a Jan 31 anchor in
// February, BYMONTHDAY=31 in April, Feb 29 in a common year).
type MonthEnd int

// The month-end policies.
const (
	// Clamp takes the month's last day instead, as Stripe's billing
	// anchor does: Jan 31, Feb 28 (29), Mar 31.
	Clamp MonthEnd = iota
	// Skip leaves the month out, as RFC 5545 does: Jan 31, Mar 31.
	Skip
)

// Convention moves an occurrence that falls on a day that is not a
// business day (a weekend or a holiday of the plan's calendar).
type Convention int

// The business-day conventions.
const (
	// NoShift charges on the day whatever it is.
	NoShift Convention = iota
	// Following takes the next business day.
	Following
	// ModifiedFollowing takes the next business day unless it is in the
	// next month, then the previous one.
	ModifiedFollowing
	// Preceding takes the previous business day.
	Preceding
)

// Reason says why an occurrence's charge time is not its rule's plain
// reading.
type Reason string

// The reasons an occurrence moved.
const (
	MovedMonthEnd Reason = "MONTH_END" // the month lacks the day: clamped
	MovedWeekend  Reason = "WEEKEND"   // shifted off a Saturday or Sunday
	MovedHoliday  Reason = "HOLIDAY"   // shifted off a holiday
	MovedDSTGap   Reason = "DST_GAP"   // the clock is missing that day: moved forward by the gap
	MovedOverlap  Reason = "DST_OVERLAP"
)

// Plan is a recurring payment's time: a rule from a local start in a zone,
// with its month-end policy and business-day convention.
type Plan struct {
	Rule     Rule
	Start    Wall
	Zone     *time.Location
	MonthEnd MonthEnd
	Shift    Convention
	// Calendar decides holidays for Shift (nil: weekends only).
	Calendar Calendar
}

// Validate reports the first reason p cannot be expanded.
func (p Plan) Validate() error {
	if err := p.Rule.Validate(); err != nil {
		return err
	}
	switch {
	case !p.Start.Valid():
		return fmt.Errorf("%w: start %s is not a calendar date and clock", ErrRule, p.Start)
	case p.Zone == nil:
		return fmt.Errorf("%w: no time zone", ErrRule)
	case p.Rule.Freq == Weekly && len(p.Rule.ByMonthDay) > 0:
		return fmt.Errorf("%w: BYMONTHDAY does not apply to FREQ=WEEKLY", ErrRule)
	case p.Rule.Until != nil && p.Rule.Until.Before(p.Start):
		return fmt.Errorf("%w: UNTIL %s is before the start %s", ErrRule, p.Rule.Until, p.Start)
	}
	return nil
}

// Occurrence is one charge of a plan.
type Occurrence struct {
	// Index counts the plan's occurrences from 1 (COUNT counts these).
	Index int
	// Nominal is the rule's local date and time (after the month-end
	// policy, before any business-day shift): with the plan's id it keys
	// the occurrence, so a calendar or tzdata change never makes a second.
	Nominal Wall
	// Local is the local date and time it is charged at, after the
	// business-day shift.
	Local Wall
	// At is the instant it is due.
	At time.Time
	// Moved says why At is not Nominal read plainly, in the order applied.
	Moved []Reason
}

// cycleDays is the Gregorian calendar's cycle, 400 years: weekdays and
// leap days repeat after it, so a rule that makes no occurrence for a
// cycle (and one period) after its last one (BYMONTH=2;BYMONTHDAY=30)
// makes none ever.
const cycleDays = 146097

// Iter walks a plan's occurrences in order.
type Iter struct {
	p      Plan
	period int    // the next period to expand
	queue  []Wall // what the last period made, not yet returned
	made   int    // occurrences returned so far (the last one's Index)
	after  *Wall  // skip occurrences at or before it (a resumed walk)
	last   time.Time
	done   bool
}

// Iter walks p from its start. p must be valid.
func (p Plan) Iter() *Iter { return &Iter{p: p, last: p.Start.date()} }

// IterAfter walks p's occurrences after the one whose nominal time is
// nominal and whose index is index: a planner resumes where it stopped
// without walking the plan from its start.
func (p Plan) IterAfter(nominal Wall, index int) *Iter {
	it := &Iter{p: p, period: p.periodOf(nominal.date()), made: index, after: &nominal, last: nominal.date()}
	return it
}

// Next is the next occurrence, or false once the rule has ended.
func (it *Iter) Next() (Occurrence, bool) {
	r := it.p.Rule
	for !it.done {
		if r.Count > 0 && it.made >= r.Count {
			it.done = true
			break
		}
		if len(it.queue) == 0 {
			from, days := it.p.expand(it.period)
			it.period++
			if (from.Unix()-it.last.Unix())/86400 > it.p.emptyDays() || from.Year() > 9999 {
				it.done = true
				break
			}
			for _, d := range days {
				w := it.p.Start.onDay(d)
				if w.Before(it.p.Start) || (it.after != nil && !it.after.Before(w)) {
					continue
				}
				it.queue = append(it.queue, w)
			}
			continue
		}
		w := it.queue[0]
		it.queue = it.queue[1:]
		if r.Until != nil && r.Until.Before(w) {
			it.done = true
			break
		}
		it.made++
		it.last = w.date()
		return it.p.occurrence(it.made, w), true
	}
	return Occurrence{}, false
}

// Next returns up to n of p's occurrences after now, from the start.
func (p Plan) Next(now time.Time, n int) []Occurrence {
	var out []Occurrence
	it := p.Iter()
	for len(out) < n {
		o, ok := it.Next()
		if !ok {
			break
		}
		if o.At.After(now) {
			out = append(out, o)
		}
	}
	return out
}

// occurrence places the nominal time w: the month-end mark, the
// business-day shift, the instant in the zone.
func (p Plan) occurrence(index int, w Wall) Occurrence {
	o := Occurrence{Index: index, Nominal: w, Local: w}
	if p.clamped(w) {
		o.Moved = append(o.Moved, MovedMonthEnd)
	}
	if d, why := p.shift(w.date()); why != "" {
		o.Local = w.onDay(d)
		o.Moved = append(o.Moved, why)
	}
	var how ZoneShift
	o.At, how = Instant(o.Local, p.Zone)
	switch how {
	case Gap:
		o.Moved = append(o.Moved, MovedDSTGap)
	case Overlap:
		o.Moved = append(o.Moved, MovedOverlap)
	}
	return o
}

// clamped says the month-end policy made w's day: the rule asked for a
// day past the month's last.
func (p Plan) clamped(w Wall) bool {
	if p.MonthEnd != Clamp || w.Day != monthLen(w.Year, w.Month) {
		return false
	}
	r := p.Rule
	if len(r.ByMonthDay) > 0 {
		if slices.Contains(r.ByMonthDay, w.Day) {
			return false
		}
		for _, d := range r.ByMonthDay {
			if d > w.Day {
				return true
			}
		}
		return false
	}
	return len(r.ByDay) == 0 && (r.Freq == Monthly || r.Freq == Yearly) && p.Start.Day > w.Day
}

// emptyDays is how many days past the last occurrence a walk looks for
// the next: a cycle and one period (in days: a time.Duration holds 292
// years).
func (p Plan) emptyDays() int64 {
	days := map[Freq]int{Daily: 1, Weekly: 7, Monthly: 31, Yearly: 366}[p.Rule.Freq]
	return int64(cycleDays + max(p.Rule.Interval, 1)*days)
}

// periodOf is the index of the period holding day d.
func (p Plan) periodOf(d time.Time) int {
	iv := max(p.Rule.Interval, 1)
	s := p.Start.date()
	var k int
	switch p.Rule.Freq {
	case Daily:
		k = int(d.Sub(s).Hours()/24) / iv
	case Weekly:
		k = int(monday(d).Sub(monday(s)).Hours()/24/7) / iv
	case Monthly:
		k = ((d.Year()-s.Year())*12 + int(d.Month()-s.Month())) / iv
	case Yearly:
		k = (d.Year() - s.Year()) / iv
	}
	return max(k, 0)
}

// expand is the sorted days period k makes, before the start and the
// ends are applied, and the period's first day.
func (p Plan) expand(k int) (time.Time, []time.Time) {
	r := p.Rule
	iv := max(r.Interval, 1)
	s := p.Start.date()
	switch r.Freq {
	case Daily:
		d := s.AddDate(0, 0, k*iv)
		if p.limits(d, true) {
			return d, []time.Time{d}
		}
		return d, nil
	case Weekly:
		mon := monday(s).AddDate(0, 0, 7*k*iv)
		var out []time.Time
		for i := range 7 {
			d := mon.AddDate(0, 0, i)
			if len(r.ByDay) == 0 && d.Weekday() != s.Weekday() {
				continue
			}
			if p.limits(d, false) {
				out = append(out, d)
			}
		}
		return mon, out
	case Monthly:
		first := time.Date(s.Year(), s.Month()+time.Month(k*iv), 1, 0, 0, 0, 0, time.UTC)
		if len(r.ByMonth) > 0 && !slices.Contains(r.ByMonth, first.Month()) {
			return first, nil
		}
		return first, p.monthDays(first.Year(), first.Month(), monthScope)
	default:
		y := s.Year() + k*iv
		first := time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
		var out []time.Time
		switch {
		case len(r.ByMonthDay) > 0 || (len(r.ByDay) > 0 && len(r.ByMonth) > 0):
			// BYDAY's ordinals count in the month under BYMONTH, else in
			// the year.
			months, sc := r.ByMonth, monthScope
			if len(months) == 0 {
				months, sc = allMonths, yearScope
			}
			for _, m := range sortedMonths(months) {
				out = append(out, p.monthDays(y, m, sc)...)
			}
		case len(r.ByDay) > 0:
			out = p.yearByDay(y)
		case len(r.ByMonth) > 0:
			for _, m := range sortedMonths(r.ByMonth) {
				out = append(out, p.anchorDay(y, m)...)
			}
		default:
			out = p.anchorDay(y, s.Month())
		}
		return first, sortUnique(out)
	}
}

var allMonths = []time.Month{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}

func sortedMonths(ms []time.Month) []time.Month {
	out := slices.Clone(ms)
	slices.Sort(out)
	return out
}

// monthDays is what a month makes: its BYMONTHDAY days (limited by
// BYDAY, an ordinal counted in sc), else its BYDAY days, else the start's
// day.
func (p Plan) monthDays(y int, m time.Month, sc scope) []time.Time {
	r := p.Rule
	n := monthLen(y, m)
	var out []time.Time
	switch {
	case len(r.ByMonthDay) > 0:
		for _, md := range r.ByMonthDay {
			day := md
			if md < 0 {
				day = n + md + 1
			}
			if md > n && p.MonthEnd == Clamp {
				day = n
			}
			if day < 1 || day > n {
				continue
			}
			d := time.Date(y, m, day, 0, 0, 0, 0, time.UTC)
			if len(r.ByDay) > 0 && !p.dayMatches(d, sc) {
				continue
			}
			out = append(out, d)
		}
	case len(r.ByDay) > 0:
		for day := 1; day <= n; day++ {
			d := time.Date(y, m, day, 0, 0, 0, 0, time.UTC)
			if p.dayMatches(d, monthScope) {
				out = append(out, d)
			}
		}
	default:
		out = p.anchorDay(y, m)
	}
	return sortUnique(out)
}

// anchorDay is the start's day of the month in month m of year y, under
// the month-end policy.
func (p Plan) anchorDay(y int, m time.Month) []time.Time {
	day, n := p.Start.Day, monthLen(y, m)
	if day > n {
		if p.MonthEnd == Skip {
			return nil
		}
		day = n
	}
	return []time.Time{time.Date(y, m, day, 0, 0, 0, 0, time.UTC)}
}

// yearByDay is YEARLY with BYDAY and no BYMONTH: ordinals count in the
// year.
func (p Plan) yearByDay(y int) []time.Time {
	var out []time.Time
	for d := time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() == y; d = d.AddDate(0, 0, 1) {
		if p.dayMatches(d, yearScope) {
			out = append(out, d)
		}
	}
	return out
}

type scope int

const (
	monthScope scope = iota
	yearScope
)

// dayMatches says d is one of BYDAY's days, an ordinal counted within
// d's month or year.
func (p Plan) dayMatches(d time.Time, sc scope) bool {
	for _, wd := range p.Rule.ByDay {
		if d.Weekday() != wd.Day {
			continue
		}
		if wd.N == 0 {
			return true
		}
		var nth, fromEnd int
		if sc == monthScope {
			nth = (d.Day()-1)/7 + 1
			fromEnd = -((monthLen(d.Year(), d.Month())-d.Day())/7 + 1)
		} else {
			yd, days := d.YearDay(), yearLen(d.Year())
			nth = (yd-1)/7 + 1
			fromEnd = -((days-yd)/7 + 1)
		}
		if wd.N == nth || wd.N == fromEnd {
			return true
		}
	}
	return false
}

// limits applies the BY rules that narrow DAILY and WEEKLY periods.
func (p Plan) limits(d time.Time, monthDay bool) bool {
	r := p.Rule
	if len(r.ByMonth) > 0 && !slices.Contains(r.ByMonth, d.Month()) {
		return false
	}
	if monthDay && len(r.ByMonthDay) > 0 {
		n, ok := monthLen(d.Year(), d.Month()), false
		for _, md := range r.ByMonthDay {
			if md == d.Day() || md < 0 && n+md+1 == d.Day() {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	if len(r.ByDay) > 0 && !p.dayMatches(d, monthScope) {
		return false
	}
	return true
}

func monday(d time.Time) time.Time {
	return d.AddDate(0, 0, -((int(d.Weekday()) + 6) % 7))
}

func monthLen(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

func yearLen(y int) int {
	return time.Date(y, 12, 31, 0, 0, 0, 0, time.UTC).YearDay()
}

func sortUnique(ds []time.Time) []time.Time {
	slices.SortFunc(ds, func(a, b time.Time) int { return a.Compare(b) })
	return slices.CompactFunc(ds, func(a, b time.Time) bool { return a.Equal(b) })
}
