package cdc

import "testing"

// TestSlotCommands: the slot is created with FAILOVER in the option-list
// syntax on servers that have failover slots (the older keyword syntax
// cannot carry it), with the keyword syntax otherwise, and a name that
// could break out of a replication command is refused.
func TestSlotCommands(t *testing.T) {
	for _, tc := range []struct {
		failover, export bool
		want             string
	}{
		{true, false, "CREATE_REPLICATION_SLOT paysched_cdc LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)"},
		{false, false, "CREATE_REPLICATION_SLOT paysched_cdc LOGICAL pgoutput NOEXPORT_SNAPSHOT"},
		// A resync reads the rows at the slot's exported snapshot.
		{true, true, "CREATE_REPLICATION_SLOT paysched_cdc LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)"},
		{false, true, "CREATE_REPLICATION_SLOT paysched_cdc LOGICAL pgoutput EXPORT_SNAPSHOT"},
	} {
		if got := createSlotSQL("paysched_cdc", tc.failover, tc.export); got != tc.want {
			t.Errorf("failover=%v export=%v: %q, want %q", tc.failover, tc.export, got, tc.want)
		}
	}
	if got, want := alterSlotFailoverSQL("paysched_cdc"), "ALTER_REPLICATION_SLOT paysched_cdc (FAILOVER true)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	for name, ok := range map[string]bool{"paysched_cdc": true, "s1": true, "": false, "Paysched": false,
		"x; DROP_REPLICATION_SLOT y": false, "a-b": false, string(make([]byte, 64)): false} {
		if slotNameRE.MatchString(name) != ok {
			t.Errorf("slot name %q: accepted=%v, want %v", name, !ok, ok)
		}
	}
}
