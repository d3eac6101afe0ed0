package recurrence_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/paysched/paysched/pkg/recurrence"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func wall(t *testing.T, s string) recurrence.Wall {
	t.Helper()
	w, err := recurrence.ParseWall(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func plan(t *testing.T, rule, start, tz string) recurrence.Plan {
	t.Helper()
	r, err := recurrence.ParseRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	p := recurrence.Plan{Rule: r, Start: wall(t, start), Zone: zone(t, tz)}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func take(p recurrence.Plan, n int) []recurrence.Occurrence {
	var out []recurrence.Occurrence
	it := p.Iter()
	for len(out) < n {
		o, ok := it.Next()
		if !ok {
			break
		}
		out = append(out, o)
	}
	return out
}

func locals(os []recurrence.Occurrence) string {
	var s []string
	for _, o := range os {
		s = append(s, o.Local.String()[:10])
	}
	return strings.Join(s, " ")
}

// TestTimeZoneGapsAndOverlaps: a clock in a spring-forward gap moves
// forward by the gap (1 hour in New York and London, 30 minutes on Lord
// Howe), and a clock in a fall-back overlap takes the first instant.
// Without the explicit rule Go's time.Date may pick either side.
func TestTimeZoneGapsAndOverlaps(t *testing.T) {
	for _, c := range []struct {
		zone, local string
		wantUTC     string
		wantClock   string
		shift       recurrence.ZoneShift
	}{
		{"America/New_York", "2026-03-08T02:30", "2026-03-08T07:30:00Z", "03:30", recurrence.Gap},
		{"America/New_York", "2026-11-01T01:30", "2026-11-01T05:30:00Z", "01:30", recurrence.Overlap},
		{"America/New_York", "2026-06-01T09:00", "2026-06-01T13:00:00Z", "09:00", recurrence.Exact},
		{"Europe/London", "2026-03-29T01:30", "2026-03-29T01:30:00Z", "02:30", recurrence.Gap},
		{"Europe/London", "2026-10-25T01:30", "2026-10-25T00:30:00Z", "01:30", recurrence.Overlap},
		{"Australia/Lord_Howe", "2026-10-04T02:15", "2026-10-03T15:45:00Z", "02:45", recurrence.Gap},
		{"Australia/Lord_Howe", "2026-04-05T01:45", "2026-04-04T14:45:00Z", "01:45", recurrence.Overlap},
	} {
		t.Run(c.zone+" "+c.local, func(t *testing.T) {
			at, how := recurrence.Instant(wall(t, c.local), zone(t, c.zone))
			if got := at.UTC().Format(time.RFC3339); got != c.wantUTC || how != c.shift {
				t.Fatalf("instant %s (%v), want %s (%v)", got, how, c.wantUTC, c.shift)
			}
			if got := at.Format("15:04"); got != c.wantClock {
				t.Fatalf("local clock %s, want %s", got, c.wantClock)
			}
		})
	}
	// A daily plan at 02:30 across New York's spring-forward: the
	// occurrence that day says why it moved, and its key keeps 02:30.
	p := plan(t, "FREQ=DAILY;COUNT=3", "2026-03-07T02:30", "America/New_York")
	os := take(p, 3)
	if os[1].Nominal.String() != "2026-03-08T02:30:00" || !slices.Equal(os[1].Moved, []recurrence.Reason{recurrence.MovedDSTGap}) {
		t.Fatalf("spring-forward occurrence: key %s moved %v", os[1].Nominal, os[1].Moved)
	}
	if os[0].Moved != nil || os[2].Moved != nil {
		t.Fatalf("the days either side moved: %v %v", os[0].Moved, os[2].Moved)
	}
}

// TestMonthEnd: a Jan 31 anchor under clamp (Stripe's) and skip (RFC
// 5545's), and Feb 29 across years.
func TestMonthEnd(t *testing.T) {
	for _, c := range []struct {
		rule, start string
		policy      recurrence.MonthEnd
		want        string
		clamped     []int // indexes (0-based) marked MONTH_END
	}{
		{"FREQ=MONTHLY;COUNT=5", "2027-01-31T09:00", recurrence.Clamp, "2027-01-31 2027-02-28 2027-03-31 2027-04-30 2027-05-31", []int{1, 3}},
		{"FREQ=MONTHLY;COUNT=5", "2027-01-31T09:00", recurrence.Skip, "2027-01-31 2027-03-31 2027-05-31 2027-07-31 2027-08-31", nil},
		{"FREQ=MONTHLY;COUNT=3", "2028-01-31T09:00", recurrence.Clamp, "2028-01-31 2028-02-29 2028-03-31", []int{1}},
		{"FREQ=YEARLY;COUNT=5", "2028-02-29T09:00", recurrence.Clamp, "2028-02-29 2029-02-28 2030-02-28 2031-02-28 2032-02-29", []int{1, 2, 3}},
		{"FREQ=YEARLY;COUNT=2", "2028-02-29T09:00", recurrence.Skip, "2028-02-29 2032-02-29", nil},
		{"FREQ=MONTHLY;BYMONTHDAY=31;COUNT=3", "2027-03-01T09:00", recurrence.Clamp, "2027-03-31 2027-04-30 2027-05-31", []int{1}},
		{"FREQ=MONTHLY;BYMONTHDAY=31;COUNT=3", "2027-03-01T09:00", recurrence.Skip, "2027-03-31 2027-05-31 2027-07-31", nil},
		{"FREQ=MONTHLY;BYMONTHDAY=30,31;COUNT=3", "2027-01-30T09:00", recurrence.Clamp, "2027-01-30 2027-01-31 2027-02-28", []int{2}},
		{"FREQ=MONTHLY;BYMONTHDAY=-1;COUNT=3", "2027-01-01T09:00", recurrence.Skip, "2027-01-31 2027-02-28 2027-03-31", nil},
	} {
		t.Run(c.rule+" "+c.start, func(t *testing.T) {
			p := plan(t, c.rule, c.start, "UTC")
			p.MonthEnd = c.policy
			os := take(p, 10)
			if got := locals(os); got != c.want {
				t.Fatalf("got %s\nwant %s", got, c.want)
			}
			for i, o := range os {
				if slices.Contains(o.Moved, recurrence.MovedMonthEnd) != slices.Contains(c.clamped, i) {
					t.Fatalf("occurrence %d (%s) moved %v; clamped ones: %v", i, o.Local, o.Moved, c.clamped)
				}
			}
		})
	}
}

// TestBusinessDays: each convention on a holiday that falls on a Friday
// (May 1) and on a Monday at a month's end (Aug 31), where modified
// following turns back to stay in the month.
func TestBusinessDays(t *testing.T) {
	hol := recurrence.Holidays{time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 8, 31, 0, 0, 0, 0, time.UTC)}
	for _, c := range []struct {
		start string
		conv  recurrence.Convention
		want  string
	}{
		{"2026-05-01T09:00", recurrence.NoShift, "2026-05-01"},
		{"2026-05-01T09:00", recurrence.Following, "2026-05-04"},
		{"2026-05-01T09:00", recurrence.ModifiedFollowing, "2026-05-04"},
		{"2026-05-01T09:00", recurrence.Preceding, "2026-04-30"},
		{"2026-08-31T09:00", recurrence.NoShift, "2026-08-31"},
		{"2026-08-31T09:00", recurrence.Following, "2026-09-01"},
		{"2026-08-31T09:00", recurrence.ModifiedFollowing, "2026-08-28"},
		{"2026-08-31T09:00", recurrence.Preceding, "2026-08-28"},
	} {
		p := plan(t, "FREQ=YEARLY;COUNT=1", c.start, "Europe/Paris")
		p.Shift, p.Calendar = c.conv, hol
		os := take(p, 1)
		if got := locals(os); got != c.want {
			t.Fatalf("%s under %d: charged %s, want %s", c.start, c.conv, got, c.want)
		}
		if moved := c.conv != recurrence.NoShift; moved != slices.Contains(os[0].Moved, recurrence.MovedHoliday) {
			t.Fatalf("%s under %d: moved %v", c.start, c.conv, os[0].Moved)
		}
		if os[0].Nominal.String()[:10] != c.start[:10] {
			t.Fatalf("the key moved with the holiday: %s", os[0].Nominal)
		}
	}
	// A weekend, and a national calendar: July 4, 2026 is a Saturday, so
	// the US observes it on Friday the 3rd.
	us, err := recurrence.CalendarFor("us")
	if err != nil {
		t.Fatal(err)
	}
	p := plan(t, "FREQ=MONTHLY;BYMONTHDAY=3,4;COUNT=2", "2026-07-01T09:00", "America/New_York")
	p.Shift, p.Calendar = recurrence.Following, us
	os := take(p, 2)
	if got := locals(os); got != "2026-07-06 2026-07-06" || os[0].Moved[0] != recurrence.MovedHoliday || os[1].Moved[0] != recurrence.MovedWeekend {
		t.Fatalf("July 3 (observed holiday) and 4 (Saturday): %s %v %v", got, os[0].Moved, os[1].Moved)
	}
	if _, err := recurrence.CalendarFor("XX"); !errors.Is(err, recurrence.ErrRule) {
		t.Fatalf("an unknown country: %v", err)
	}
}

// TestCatchUp: a pause that spans three occurrences.
func TestCatchUp(t *testing.T) {
	p := plan(t, "FREQ=MONTHLY;COUNT=6", "2027-01-15T09:00", "UTC")
	os := take(p, 6)
	missed := os[1:4] // paused from late January to late April
	for _, c := range []struct {
		policy recurrence.CatchUp
		bound  int
		want   []int
	}{
		{recurrence.SkipMissed, 0, nil},
		{recurrence.LatestOnly, 0, []int{4}},
		{recurrence.All, 12, []int{2, 3, 4}},
		{recurrence.All, 2, []int{3, 4}},
	} {
		var got []int
		for _, o := range c.policy.Keep(missed, c.bound) {
			got = append(got, o.Index)
		}
		if !slices.Equal(got, c.want) {
			t.Fatalf("policy %d bound %d kept %v, want %v", c.policy, c.bound, got, c.want)
		}
	}
}

// TestRules: the subset's shapes, read and expanded.
func TestRules(t *testing.T) {
	for _, c := range []struct{ rule, start, want string }{
		{"FREQ=MONTHLY;BYDAY=-1FR;COUNT=3", "2027-01-01T09:00", "2027-01-29 2027-02-26 2027-03-26"},
		// Without BYSETPOS every weekday among the last three days counts.
		{"FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYMONTHDAY=-1,-2,-3;COUNT=4", "2027-01-01T09:00", "2027-01-29 2027-02-26 2027-03-29 2027-03-30"},
		{"FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH;COUNT=4", "2027-01-04T09:00", "2027-01-04 2027-01-07 2027-01-18 2027-01-21"},
		{"FREQ=WEEKLY;INTERVAL=2;COUNT=3", "2027-01-06T09:00", "2027-01-06 2027-01-20 2027-02-03"},
		{"FREQ=DAILY;INTERVAL=10;BYMONTH=2;COUNT=3", "2027-01-01T09:00", "2027-02-10 2027-02-20 2028-02-05"},
		{"FREQ=YEARLY;BYMONTH=3,9;BYDAY=2SU;COUNT=3", "2027-01-01T09:00", "2027-03-14 2027-09-12 2028-03-12"},
		{"FREQ=YEARLY;BYDAY=1MO;COUNT=2", "2027-01-01T09:00", "2027-01-04 2028-01-03"},
		{"FREQ=MONTHLY;UNTIL=20270401T090000", "2027-01-01T09:00", "2027-01-01 2027-02-01 2027-03-01 2027-04-01"},
		{"FREQ=MONTHLY;UNTIL=20270401", "2027-01-01T09:00", "2027-01-01 2027-02-01 2027-03-01"},
		{"FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=30", "2027-01-01T09:00", ""},
		{"FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30", "2027-01-01T09:00", ""},
		{"FREQ=YEARLY;INTERVAL=4;BYMONTH=1;BYMONTHDAY=25,4,16;BYDAY=-3TH;COUNT=3", "2029-05-30T15:11", "2053-01-16 2081-01-16 2121-01-16"},
	} {
		t.Run(c.rule, func(t *testing.T) {
			p := plan(t, c.rule, c.start, "UTC")
			p.MonthEnd = recurrence.Skip
			if got := locals(take(p, 50)); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			if back, err := recurrence.ParseRule(p.Rule.String()); err != nil || back.String() != p.Rule.String() {
				t.Fatalf("String does not read back: %q: %v", p.Rule.String(), err)
			}
		})
	}
	for _, bad := range []string{"", "FREQ=HOURLY", "FREQ=DAILY;BYDAY=1MO", "FREQ=MONTHLY;BYMONTHDAY=0", "FREQ=MONTHLY;BYMONTHDAY=32",
		"FREQ=MONTHLY;COUNT=2;UNTIL=20270101", "FREQ=MONTHLY;UNTIL=20270101T000000Z", "FREQ=MONTHLY;BYSETPOS=1", "FREQ=MONTHLY;FREQ=DAILY",
		"FREQ=MONTHLY;INTERVAL=0", "FREQ=MONTHLY;BYDAY=XX", "FREQ=MONTHLY;BYDAY=6MO", "FREQ=MONTHLY;WKST=SU", "FREQ", "FREQ=MONTHLY;BYDAY=2WE,FR"} {
		if _, err := recurrence.ParseRule(bad); !errors.Is(err, recurrence.ErrRule) {
			t.Errorf("ParseRule(%q) = %v, want ErrRule", bad, err)
		}
	}
}

// TestIterAfterResumes: a walk resumed after any occurrence makes exactly
// what the walk from the start makes next, for every shape of rule.
func TestIterAfterResumes(t *testing.T) {
	for _, rule := range []string{"FREQ=DAILY;INTERVAL=3", "FREQ=WEEKLY;BYDAY=MO,FR", "FREQ=MONTHLY;BYDAY=-1FR", "FREQ=MONTHLY",
		"FREQ=YEARLY;BYMONTH=1,7;BYMONTHDAY=31", "FREQ=MONTHLY;COUNT=7"} {
		p := plan(t, rule, "2027-01-31T23:30", "Pacific/Auckland")
		all := take(p, 40)
		for i := range all {
			it := p.IterAfter(all[i].Nominal, all[i].Index)
			for j := i + 1; j < len(all); j++ {
				o, ok := it.Next()
				if !ok || o.Index != all[j].Index || o.Nominal != all[j].Nominal || !o.At.Equal(all[j].At) {
					t.Fatalf("%s resumed after %s: got %v %v, want %v", rule, all[i].Nominal, ok, o.Nominal, all[j].Nominal)
				}
			}
			if _, ok := it.Next(); ok && len(all) < 40 {
				t.Fatalf("%s resumed after %s: more than the plan makes", rule, all[i].Nominal)
			}
		}
	}
}
