package approval

import (
	"flag"
	"testing"

	"github.com/google/uuid"
)

func TestStrictPolicyIsValid(t *testing.T) {
	p := Strict()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Relaxed() {
		t.Fatal("the strict policy lets one admin move money")
	}
}

// TestNeeds: which actions wait for a second admin, policy by policy.
func TestNeeds(t *testing.T) {
	one := func(amount int64, cur string) Selection {
		var s Selection
		s.Add(uuid.New(), 1, amount, cur)
		return s
	}
	two := one(10, "EUR")
	two.Add(uuid.New(), 1, 10, "EUR")
	loose := Strict()
	loose.Single["RELEASE"], loose.Single["REDRIVE"] = true, true
	loose.Amount, loose.Amounts = 1000, map[string]int64{"JPY": 100000}
	none := Running{Totals: map[string]int64{}}
	for _, c := range []struct {
		name   string
		p      Policy
		action string
		s      Selection
		r      Running
		want   bool
	}{
		{"strict: a hold is one admin's", Strict(), "HOLD", one(10, "EUR"), none, false},
		{"strict: a release needs two", Strict(), "RELEASE", one(10, "EUR"), none, true},
		{"strict: a re-drive needs two", Strict(), "REDRIVE", one(10, "EUR"), none, true},
		{"strict: a hold of many needs two", Strict(), "HOLD", two, none, true},
		{"loose: a small release is one admin's", loose, "RELEASE", one(999, "EUR"), none, false},
		{"loose: at the amount needs two", loose, "RELEASE", one(1000, "EUR"), none, true},
		{"loose: per-currency amounts", loose, "RELEASE", one(50000, "JPY"), none, false},
		{"loose: a resolve is not in the list", loose, "RESOLVE", one(10, "EUR"), none, true},
		{"loose: a split adds up", loose, "RELEASE", one(600, "EUR"), Running{Count: 1, Totals: map[string]int64{"EUR": 600}}, true},
		{"loose: other currencies do not add", loose, "RELEASE", one(600, "EUR"), Running{Count: 1, Totals: map[string]int64{"USD": 900}}, false},
		{"loose: past the count", loose, "RELEASE", one(1, "EUR"), Running{Count: 10, Totals: map[string]int64{}}, true},
	} {
		if got := c.p.Needs(c.action, c.s, c.r); got != c.want {
			t.Errorf("%s: needs approval = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestFlagsRefuseOneAdminMovingMoneyOutsideDevelopment.
func TestFlagsRefuseOneAdminMovingMoneyOutsideDevelopment(t *testing.T) {
	for _, c := range []struct {
		args []string
		dev  bool
		ok   bool
	}{
		{nil, false, true},
		{[]string{"--approval-single", "HOLD,RELEASE"}, false, false},
		{[]string{"--approval-single", "HOLD,RELEASE"}, true, true},
		{[]string{"--approval-single", "SET_LIMITS"}, true, false},
		{[]string{"--approval-single", "ROTATE"}, true, false},
		{[]string{"--approval-single", "HOLD"}, false, true},
		{[]string{"--approval-single", "nonsense"}, true, false},
		{[]string{"--approval-expiry", "1s"}, false, false},
		{[]string{"--approval-amounts", "EUR=5,ZZZ=1"}, false, false},
		{[]string{"--approval-window", "0s"}, false, false},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f := RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		_, err := f.Policy(c.dev)
		if (err == nil) != c.ok {
			t.Errorf("%v (dev %v): %v, want ok %v", c.args, c.dev, err, c.ok)
		}
	}
}
