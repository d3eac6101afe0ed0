// Package rruleoracle_test checks pkg/recurrence against an oracle no one
// here wrote: the npm rrule package (2.8.1), which expands the same random
// rules. The comparison is before any business-day shift and under the
// month-end policy RFC 5545 has (skip), on floating wall clocks.
package rruleoracle_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/recurrence"
	"github.com/paysched/paysched/test/nodetest"
)

type oracleCase struct {
	DTStart string `json:"dtstart"`
	Rule    string `json:"rule"`
	Max     int    `json:"max"`
}

// randomRule draws a rule of the subset: every FREQ, INTERVAL, BYMONTH,
// BYMONTHDAY (either sign), BYDAY (ordinals where they apply), and COUNT
// or UNTIL.
func randomRule(rng *rand.Rand, start time.Time) string {
	freq := []string{"DAILY", "WEEKLY", "MONTHLY", "YEARLY"}[rng.IntN(4)]
	parts := []string{"FREQ=" + freq}
	if rng.IntN(2) == 0 {
		parts = append(parts, fmt.Sprintf("INTERVAL=%d", 1+rng.IntN(4)))
	}
	pick := func(n, from int, sign bool) []string {
		var out []string
		for range 1 + rng.IntN(n) {
			v := from + rng.IntN(32-from)
			if sign && rng.IntN(3) == 0 {
				v = -v
			}
			s := fmt.Sprint(v)
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		return out
	}
	if rng.IntN(3) == 0 {
		var ms []string
		for range 1 + rng.IntN(3) {
			if m := fmt.Sprint(1 + rng.IntN(12)); !slices.Contains(ms, m) {
				ms = append(ms, m)
			}
		}
		parts = append(parts, "BYMONTH="+strings.Join(ms, ","))
	}
	if freq != "WEEKLY" && rng.IntN(3) == 0 {
		parts = append(parts, "BYMONTHDAY="+strings.Join(pick(3, 1, true), ","))
	}
	if rng.IntN(2) == 0 {
		days := []string{"MO", "TU", "WE", "TH", "FR", "SA", "SU"}
		var bd []string
		// All ordinal or all plain: ours refuses a mix (rule.go says why).
		ordinal := (freq == "MONTHLY" || freq == "YEARLY") && rng.IntN(2) == 0
		for range 1 + rng.IntN(3) {
			d := days[rng.IntN(7)]
			if ordinal {
				n := 1 + rng.IntN(4)
				if rng.IntN(2) == 0 {
					n = -n
				}
				d = fmt.Sprint(n) + d
			}
			if !slices.Contains(bd, d) {
				bd = append(bd, d)
			}
		}
		parts = append(parts, "BYDAY="+strings.Join(bd, ","))
	}
	if rng.IntN(3) == 0 {
		parts = append(parts, "UNTIL="+start.AddDate(rng.IntN(4), rng.IntN(12), rng.IntN(28)).Format("20060102T150405"))
	} else {
		parts = append(parts, fmt.Sprintf("COUNT=%d", 1+rng.IntN(30)))
	}
	return strings.Join(parts, ";")
}

func TestOursAgreesWithNpmRrule(t *testing.T) {
	nodetest.Require(t, "the rrule oracle", "node", "npm")
	const rules, max = 1000, 40
	rng := rand.New(rand.NewPCG(20261207, 44))
	var cases []oracleCase
	var ours [][]string
	for range rules {
		start := time.Date(2020+rng.IntN(16), time.Month(1+rng.IntN(12)), 1+rng.IntN(31), rng.IntN(24), rng.IntN(60), 0, 0, time.UTC)
		rule := randomRule(rng, start)
		r, err := recurrence.ParseRule(rule)
		if err != nil {
			t.Fatalf("our parser refuses a rule of the subset %q: %v", rule, err)
		}
		p := recurrence.Plan{Rule: r, Start: recurrence.WallOf(start), Zone: time.UTC, MonthEnd: recurrence.Skip}
		if err := p.Validate(); err != nil {
			continue // UNTIL before the start
		}
		var got []string
		it := p.Iter()
		for len(got) < max {
			o, ok := it.Next()
			if !ok {
				break
			}
			got = append(got, o.Nominal.String())
		}
		cases = append(cases, oracleCase{DTStart: start.Format("20060102T150405"), Rule: rule, Max: max})
		ours = append(ours, got)
	}
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	dir := nodetest.Install(t, "package.json", "package-lock.json", "expand.mjs")
	if err := os.WriteFile(filepath.Join(dir, "cases.json"), in, 0o644); err != nil {
		t.Fatal(err)
	}
	out := nodetest.Run(t, dir, nil, "sh", "-c", "node expand.mjs < cases.json")
	var theirs [][]string
	if err := json.Unmarshal([]byte(out), &theirs); err != nil {
		t.Fatalf("the oracle's answer: %v\n%s", err, out)
	}
	if len(theirs) != len(cases) {
		t.Fatalf("the oracle answered %d rules of %d", len(theirs), len(cases))
	}
	bad := 0
	for i := range cases {
		if !slices.Equal(ours[i], theirs[i]) && bad < 10 {
			bad++
			t.Errorf("DTSTART:%s RRULE:%s\n ours:   %v\n rrule:  %v", cases[i].DTStart, cases[i].Rule, ours[i], theirs[i])
		}
	}
	t.Logf("%d rules compared", len(cases))
}
