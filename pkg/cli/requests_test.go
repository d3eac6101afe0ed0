package cli_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/services/admin-api/adminserver"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPayctlRequests: payctl release, as one admin, says the release
// awaits a second admin and moves nothing; `requests list` shows it; its
// requester cannot approve it; `requests approve` as another admin
// applies it, against a real admin-api.
func TestPayctlRequests(t *testing.T) {
	const secret = "a-test-secret-of-enough-length-32b"
	url := pgtest.NewURL(t)
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := adminserver.New(ctx, adminserver.Config{DatabaseURL: url, DBMaxConns: 4,
		Auth: auth.Config{HS256Secret: []byte(secret), Issuer: auth.DefaultIssuer, AdminAudience: auth.DefaultAdminAudience}},
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
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	id := uuid.New()
	if _, err := store.NewStore(db).Create(context.Background(), []store.NewPayment{{ID: id, Payer: "alice", Payee: "bob", Amount: 500,
		Currency: "EUR", DueAt: time.Now().Add(time.Hour), CreatedAt: time.Now(), IdempotencyKey: id.String(), Tenant: "t"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(context.Background(), `UPDATE payments SET status = 'HELD' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	as := func(actor string, args ...string) (string, error) {
		return payctl(t, append([]string{"--admin-api", addr, "--jwt-secret", secret, "--actor", actor}, args...)...)
	}
	status := func() string {
		var s string
		if err := db.QueryRow(context.Background(), `SELECT status FROM payments WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	out, err := as("ada", "release", id.String())
	if err != nil || !strings.Contains(out, "request moves/1") || !strings.Contains(out, "awaits a second admin's approval") || status() != "HELD" {
		t.Fatalf("release by one admin: %q %v (payment %s)", out, err, status())
	}
	if out, err := as("ada", "requests", "list", "--state", "awaiting_approval"); err != nil || !strings.Contains(out, "moves/1") ||
		!strings.Contains(out, "RELEASE") || !strings.Contains(out, id.String()) {
		t.Fatalf("requests list: %q %v", out, err)
	}
	if _, err := as("ada", "requests", "approve", "moves/1"); err == nil || !strings.Contains(err.Error(), "OWN_REQUEST") {
		t.Fatalf("the requester approving: %v, want OWN_REQUEST", err)
	}
	if out, err := as("bea", "requests", "approve", "moves/1"); err != nil || !strings.Contains(out, `"DONE"`) || status() != "PENDING" {
		t.Fatalf("approve by a second admin: %q %v (payment %s)", out, err, status())
	}
	// A schedule's pause, likewise: asked by one, approved by another
	// (payments-api's planner applies it).
	next := time.Now().AddDate(0, 1, 0)
	sched := store.Schedule{ID: uuid.New(), Tenant: "t", Payer: "alice", Payee: "landlord", Amount: 1000, Currency: "EUR",
		Rule: "FREQ=MONTHLY", Start: next.UTC().Format("2006-01-02T15:04:05"), Zone: "UTC", MonthEnd: "CLAMP",
		BusinessDays: "NONE", CatchUp: "SKIP_MISSED", CatchUpBound: 12, NextAt: &next}
	if _, _, err := store.CreateSchedule(context.Background(), db, sched); err != nil {
		t.Fatal(err)
	}
	if out, err := as("ada", "schedules", "request", sched.ID.String(), "pause", "--note", "the payer asked"); err != nil ||
		!strings.Contains(out, "request schedules/1 (PAUSE on schedule "+sched.ID.String()+")") {
		t.Fatalf("schedules request: %q %v", out, err)
	}
	if _, err := as("ada", "schedules", "request", sched.ID.String(), "pause"); err == nil || !strings.Contains(err.Error(), "note") {
		t.Fatalf("a request without a note: %v", err)
	}
	if out, err := as("bea", "requests", "approve", "schedules/1"); err != nil || !strings.Contains(out, `"APPROVED"`) {
		t.Fatalf("approve the schedule's pause: %q %v", out, err)
	}
}
