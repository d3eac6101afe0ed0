package recurrence

import (
	"testing"
	"time"
)

func TestZoneRulesFingerprintTheOffsets(t *testing.T) {
	london, err := ZoneRules("Europe/London")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := ZoneRules("Europe/London")
	utc, _ := ZoneRules("UTC")
	paris, _ := ZoneRules("Europe/Paris")
	if london != again || london == utc || london == paris {
		t.Fatalf("fingerprints: London %s (again %s), UTC %s, Paris %s", london, again, utc, paris)
	}
	// A zone whose rules differ only after a date differs: a fixed zone
	// and one that left it.
	fixed := time.FixedZone("X", 3600)
	locations.Store("Test/Fixed", fixed)
	locations.Store("Test/Changed", time.FixedZone("X", 7200))
	a, _ := ZoneRules("Test/Fixed")
	b, _ := ZoneRules("Test/Changed")
	if a == b {
		t.Fatal("two zones with different offsets share a fingerprint")
	}
	if _, err := ZoneRules("Not/AZone"); err == nil {
		t.Fatal("an unknown zone has a fingerprint")
	}
}
