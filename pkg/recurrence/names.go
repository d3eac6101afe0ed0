package recurrence

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	// Zone data goes with the binary: a host without zoneinfo still reads
	// every plan's zone, with the data this build was made with.
	_ "time/tzdata"
)

// The API's and the schedules table's names of the policies.
var (
	monthEndNames   = map[string]MonthEnd{"CLAMP": Clamp, "SKIP": Skip}
	conventionNames = map[string]Convention{"NONE": NoShift, "FOLLOWING": Following, "MODIFIED_FOLLOWING": ModifiedFollowing, "PRECEDING": Preceding}
	catchUpNames    = map[string]CatchUp{"SKIP_MISSED": SkipMissed, "LATEST_ONLY": LatestOnly, "ALL": All}
)

func named[T any](what string, names map[string]T, s string) (T, error) {
	if v, ok := names[strings.ToUpper(s)]; ok {
		return v, nil
	}
	var zero T
	var known []string
	for k := range names {
		known = append(known, k)
	}
	return zero, fmt.Errorf("%w: %s %q: want one of %s", ErrRule, what, s, strings.Join(sorted(known), ", "))
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// ParseMonthEnd reads CLAMP or SKIP.
func ParseMonthEnd(s string) (MonthEnd, error) { return named("month end", monthEndNames, s) }

// ParseConvention reads NONE, FOLLOWING, MODIFIED_FOLLOWING or PRECEDING.
func ParseConvention(s string) (Convention, error) { return named("business days", conventionNames, s) }

// ParseCatchUp reads SKIP_MISSED, LATEST_ONLY or ALL.
func ParseCatchUp(s string) (CatchUp, error) { return named("catch up", catchUpNames, s) }

// Spec is a plan as the API and the schedules table write it: strings.
type Spec struct {
	Rule, Start, Zone, MonthEnd, BusinessDays, Calendar string
}

// Plan reads s. A business-day convention other than NONE takes the
// calendar's holidays (empty: weekends only).
func (s Spec) Plan() (Plan, error) {
	r, err := ParseRule(s.Rule)
	if err != nil {
		return Plan{}, err
	}
	start, err := ParseWall(s.Start)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: %v", ErrRule, err)
	}
	if s.Zone == "" || strings.EqualFold(s.Zone, "local") {
		return Plan{}, fmt.Errorf("%w: time zone %q: want an IANA name such as Europe/Paris", ErrRule, s.Zone)
	}
	loc, err := location(s.Zone)
	if err != nil {
		return Plan{}, fmt.Errorf("%w: time zone %q is not an IANA zone", ErrRule, s.Zone)
	}
	p := Plan{Rule: r, Start: start, Zone: loc}
	if p.MonthEnd, err = ParseMonthEnd(orDefault(s.MonthEnd, "CLAMP")); err != nil {
		return Plan{}, err
	}
	if p.Shift, err = ParseConvention(orDefault(s.BusinessDays, "NONE")); err != nil {
		return Plan{}, err
	}
	if s.Calendar != "" {
		if p.Calendar, err = calendar(s.Calendar); err != nil {
			return Plan{}, err
		}
	}
	return p, p.Validate()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// locations and calendars are read once per process: a planner reads
// thousands of plans a second, and time.LoadLocation parses the zone's
// file each time. Both are immutable once made.
var locations, calendars sync.Map

func location(name string) (*time.Location, error) {
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	locations.Store(name, l)
	return l, nil
}

func calendar(country string) (Calendar, error) {
	if c, ok := calendars.Load(country); ok {
		return c.(Calendar), nil
	}
	c, err := CalendarFor(country)
	if err != nil {
		return nil, err
	}
	calendars.Store(country, c)
	return c, nil
}
