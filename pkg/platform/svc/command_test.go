package svc_test

import (
	"testing"

	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/svc"
)

// TestNewCommandFlags: the zero Flags give the common database flag and a
// metrics-only --http-addr; set fields replace them.
func TestNewCommandFlags(t *testing.T) {
	cmd := svc.NewCommand(svc.Flags{Name: "x", HTTPAddr: "127.0.0.1:1"})
	for name, want := range map[string][2]string{
		"database-url": {config.LocalDatabaseURL, "Postgres URL"},
		"http-addr":    {"127.0.0.1:1", svc.MetricsUsage},
		"dev":          {"false", ""},
	} {
		f := cmd.Lookup(name)
		if f == nil {
			t.Fatalf("--%s is missing", name)
		}
		if f.DefValue != want[0] || (want[1] != "" && f.Usage != want[1]) {
			t.Errorf("--%s: default %q usage %q, want %q %q", name, f.DefValue, f.Usage, want[0], want[1])
		}
	}
	cmd = svc.NewCommand(svc.Flags{Name: "y", DatabaseFlag: "other-url", DatabaseDefault: "postgres://h/db", DatabaseUsage: "u", HTTPUsage: "h"})
	if f := cmd.Lookup("other-url"); f == nil || f.DefValue != "postgres://h/db" || f.Usage != "u" || cmd.Lookup("database-url") != nil {
		t.Errorf("the database flag was not replaced: %+v", f)
	}
	if f := cmd.Lookup("http-addr"); f.Usage != "h" {
		t.Errorf("--http-addr usage %q, want h", f.Usage)
	}
	if cmd.Name() != "y" {
		t.Errorf("name %q, want y", cmd.Name())
	}
}
