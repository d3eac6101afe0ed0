package recurrence

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rickar/cal/v2"
	"github.com/rickar/cal/v2/at"
	"github.com/rickar/cal/v2/be"
	"github.com/rickar/cal/v2/br"
	"github.com/rickar/cal/v2/ca"
	"github.com/rickar/cal/v2/ch"
	"github.com/rickar/cal/v2/de"
	"github.com/rickar/cal/v2/dk"
	"github.com/rickar/cal/v2/es"
	"github.com/rickar/cal/v2/fi"
	"github.com/rickar/cal/v2/fr"
	"github.com/rickar/cal/v2/gb"
	"github.com/rickar/cal/v2/ie"
	"github.com/rickar/cal/v2/it"
	"github.com/rickar/cal/v2/mx"
	"github.com/rickar/cal/v2/nl"
	"github.com/rickar/cal/v2/no"
	"github.com/rickar/cal/v2/nz"
	"github.com/rickar/cal/v2/pl"
	"github.com/rickar/cal/v2/pt"
	"github.com/rickar/cal/v2/se"
	"github.com/rickar/cal/v2/us"
	"github.com/rickar/cal/v2/za"
)

// Calendar says which days are holidays. Weekends are never business days
// whatever it says.
type Calendar interface {
	IsHoliday(d time.Time) bool
}

// countries are the national calendars a plan may name, by ISO 3166-1
// alpha-2 code: github.com/rickar/cal/v2's national lists (actual days and
// their observed substitutes; regional holidays are not included).
var countries = map[string][]*cal.Holiday{
	"AT": at.Holidays, "BE": be.Holidays, "BR": br.Holidays, "CA": ca.Holidays, "CH": ch.Holidays,
	"DE": de.Holidays, "DK": dk.Holidays, "ES": es.Holidays, "FI": fi.Holidays, "FR": fr.Holidays, "GB": gb.Holidays,
	"IE": ie.Holidays, "IT": it.Holidays, "MX": mx.Holidays, "NL": nl.Holidays, "NO": no.Holidays, "NZ": nz.Holidays,
	"PL": pl.Holidays, "PT": pt.Holidays, "SE": se.Holidays, "US": us.Holidays, "ZA": za.Holidays,
}

// Countries are the codes CalendarFor knows, sorted.
func Countries() []string {
	var out []string
	for c := range countries {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// national is a country's holidays, actual or observed.
type national struct{ c *cal.Calendar }

func (n national) IsHoliday(d time.Time) bool {
	act, obs, _ := n.c.IsHoliday(d)
	return act || obs
}

// CalendarFor is the national holiday calendar of an ISO 3166-1 alpha-2
// country code.
func CalendarFor(country string) (Calendar, error) {
	hs, ok := countries[strings.ToUpper(country)]
	if !ok {
		return nil, fmt.Errorf("%w: no holiday calendar for %q (known: %s)", ErrRule, country, strings.Join(Countries(), ", "))
	}
	c := &cal.Calendar{Cacheable: true}
	c.AddHoliday(hs...)
	return national{c}, nil
}

// Holidays is a calendar of fixed dates, for tests and for a deployment's
// own list.
type Holidays []time.Time

// IsHoliday says d's date is in h.
func (h Holidays) IsHoliday(d time.Time) bool {
	y, m, dd := d.Date()
	return slices.ContainsFunc(h, func(x time.Time) bool {
		xy, xm, xd := x.Date()
		return xy == y && xm == m && xd == dd
	})
}

// business says d is neither a weekend nor a holiday of p's calendar, and
// why not.
func (p Plan) business(d time.Time) (bool, Reason) {
	if d.Weekday() == time.Saturday || d.Weekday() == time.Sunday {
		return false, MovedWeekend
	}
	if p.Calendar != nil && p.Calendar.IsHoliday(d) {
		return false, MovedHoliday
	}
	return true, ""
}

// shift applies p's convention to day d: the day charged and why it
// moved ("" when it did not).
func (p Plan) shift(d time.Time) (time.Time, Reason) {
	if p.Shift == NoShift {
		return d, ""
	}
	ok, why := p.business(d)
	if ok {
		return d, ""
	}
	step := func(from time.Time, by int) time.Time {
		for i := 0; i < 60; i++ {
			from = from.AddDate(0, 0, by)
			if ok, _ := p.business(from); ok {
				return from
			}
		}
		return from // a calendar with two months of holidays: give up there
	}
	switch p.Shift {
	case Following:
		return step(d, 1), why
	case Preceding:
		return step(d, -1), why
	default: // ModifiedFollowing
		if next := step(d, 1); next.Month() == d.Month() {
			return next, why
		}
		return step(d, -1), why
	}
}
