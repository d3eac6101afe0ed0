package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/services/payments-api/paymentsserver"
	"github.com/paysched/paysched/test/pgtest"
)

// TestPayctlSchedules: payctl previews a plan (a Jan 31 start clamped to
// Feb 28), makes a schedule, lists, gets, previews, pauses, resumes and
// cancels it against a real payments-api, and a bad rule's error names
// its field.
func TestPayctlSchedules(t *testing.T) {
	const secret = "a-test-secret-of-enough-length-32b"
	url := pgtest.NewURL(t)
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := paymentsserver.New(ctx, paymentsserver.Config{DatabaseURL: url, DBMaxConns: 4,
		Auth:         auth.Config{HS256Secret: []byte(secret), Issuer: auth.DefaultIssuer, Audience: auth.DefaultAudience},
		Rules:        payments.Rules{DefaultCurrency: "EUR", AmountCap: 1_000_000, Horizon: 365 * 24 * time.Hour},
		CursorSecret: []byte("cursor-secret-cursor-secret-0123"), NoPlanner: true},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	addr := l.GRPC.Addr().String()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); _ = <-done })
	run := func(args ...string) string {
		t.Helper()
		out, err := payctl(t, append([]string{"--api", addr, "--jwt-secret", secret, "--actor", "rita"}, args...)...)
		if err != nil {
			t.Fatalf("payctl %v: %v\n%s", args, err, out)
		}
		return out
	}
	year := time.Now().Year() + 2 // ahead of whenever the test runs
	febEnd := fmt.Sprintf("%d-02-%02dT09:00:00", year, time.Date(year, 3, 0, 0, 0, 0, 0, time.UTC).Day())
	out := run("schedules", "preview", "--rrule", "FREQ=MONTHLY;COUNT=3", "--start", fmt.Sprintf("%d-01-31T09:00", year), "--time-zone", "Europe/Paris")
	if !strings.Contains(out, febEnd) || !strings.Contains(out, "MONTH_END") {
		t.Fatalf("preview of a plan:\n%s", out)
	}
	from := time.Now().UTC().Add(72 * time.Hour).Format("2006-01-02T15:04")
	out = run("schedules", "create", "--payee", "landlord", "--amount", "120000", "--rrule", "FREQ=MONTHLY", "--start", from,
		"--time-zone", "Europe/Paris", "--business-days", "following", "--calendar", "fr", "--json")
	id := jsonField(t, out, "schedule", "scheduleId")
	if out := run("schedules", "list"); !strings.Contains(out, id) || !strings.Contains(out, "ACTIVE") {
		t.Fatalf("list:\n%s", out)
	}
	if out := run("schedules", "preview", id, "--count", "2"); strings.Count(out, "\n") != 3 {
		t.Fatalf("preview of the schedule:\n%s", out)
	}
	if out := run("schedules", "update", id, "--payee", "landlord", "--amount", "125000", "--rrule", "FREQ=MONTHLY", "--start", from,
		"--time-zone", "Europe/Paris"); !strings.Contains(out, "125000 EUR") {
		t.Fatalf("update:\n%s", out)
	}
	if out := run("schedules", "pause", id, "--resume-at", "+720h"); !strings.Contains(out, "PAUSED") {
		t.Fatalf("pause:\n%s", out)
	}
	if out := run("schedules", "resume", id); !strings.Contains(out, "ACTIVE") {
		t.Fatalf("resume:\n%s", out)
	}
	if out := run("schedules", "cancel", id); !strings.Contains(out, "CANCELLED") {
		t.Fatalf("cancel:\n%s", out)
	}
	if out := run("schedules", "get", id); !strings.Contains(out, "CANCELLED") || !strings.Contains(out, "OCCURRENCE") {
		t.Fatalf("get:\n%s", out)
	}
	if out, err := payctl(t, "--api", addr, "--jwt-secret", secret, "--actor", "rita", "schedules", "create", "--payee", "x",
		"--amount", "1", "--rrule", "FREQ=HOURLY", "--start", from); err == nil || !strings.Contains(err.Error()+out, "rrule") {
		t.Fatalf("a bad rule: %v %s", err, out)
	}
}

// jsonField is a string field of payctl's --json output, by its path.
func jsonField(t *testing.T, out string, path ...string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	if s == "" {
		t.Fatalf("no %v in\n%s", path, out)
	}
	return s
}
