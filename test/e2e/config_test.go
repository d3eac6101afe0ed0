package e2e_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBadConfigIsRefused: every service checks its configuration before it
// connects anywhere, and says which flag is wrong, instead of hanging or
// running crippled.
func TestBadConfigIsRefused(t *testing.T) {
	bin := build(t, "./services/...")
	for _, c := range []struct {
		service string
		args    []string
		want    string
	}{
		{"executor", []string{"--concurrency", "0"}, "--concurrency must be at least 1"},
		{"executor", []string{"--backoff", "soon"}, "--backoff"},
		{"sweeper", []string{"--batch", "0"}, "--batch must be at least 1"},
		{"sweeper", []string{"--executors", ""}, "--executors"},
		{"reaper", []string{"--interval", "0s"}, "--interval must be positive"},
		{"cdc", []string{"--kafka-compression", "brotli"}, "--kafka-compression"},
		{"audit-consumer", []string{"--write-streams", "0"}, "--write-streams must be at least 1"},
		{"reconciler", []string{"--run-at", "25:00"}, "--run-at"},
		{"payments-api", []string{"--default-currency", "XXQ"}, "--default-currency"},
		{"payments-api", []string{"--amount-cap", "0"}, "--amount-cap must be positive"},
	} {
		t.Run(c.service+strings.Join(c.args, "="), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// Unreachable database: a service that got past validation
			// would hang or fail on connecting, not on the flag.
			args := append([]string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}, c.args...)
			out, err := exec.CommandContext(ctx, bin+"/"+c.service, args...).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("%s %v still running after 20s:\n%s", c.service, c.args, out)
			}
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("%s %v: %v, want exit status 1:\n%s", c.service, c.args, err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("%s %v said:\n%s\nwant it to mention %q", c.service, c.args, out, c.want)
			}
		})
	}
}
