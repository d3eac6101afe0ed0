// Package apitest runs a payments-api in process over a fresh database,
// as the client tests (the generated client, the SDKs) need one.
package apitest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/services/payments-api/paymentsserver"
	"github.com/paysched/paysched/test/pgtest"
)

// Secret is the HS256 secret the API verifies tokens with.
const Secret = "apitest-secret-of-enough-length-32b"

// Start runs a payments-api (loopback webhook endpoints allowed, no
// planner) and returns its REST base URL; it stops with the test.
func Start(t *testing.T) string {
	t.Helper()
	cfg := paymentsserver.Config{
		DatabaseURL: pgtest.NewURL(t),
		DBMaxConns:  8,
		Auth: auth.Config{HS256Secret: []byte(Secret), Issuer: auth.DefaultIssuer,
			Audience: auth.DefaultAudience},
		Rules:            payments.Rules{DefaultCurrency: "EUR", AmountCap: 1_000_000, Horizon: 365 * 24 * time.Hour},
		CursorSecret:     []byte("cursor"),
		LoopbackWebhooks: true,
		NoPlanner:        true,
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := paymentsserver.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("payments-api: %v", err)
		}
	})
	return "http://" + l.HTTP.Addr().String()
}

// Token is a payer's token for actor, naming tenant ("": none).
func Token(t *testing.T, actor, tenant string) string {
	t.Helper()
	tok, err := auth.MintFor([]byte(Secret), auth.DefaultIssuer, auth.DefaultAudience, actor, tenant, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
