// Package openapiclient tests the public OpenAPI document the way a client
// team uses it: it generates a JavaScript client from the /openapi.json a
// running payments-api serves (swagger-typescript-api, pinned in
// package-lock.json) and drives the API with it (driver.mjs). A document
// that does not say what the server does breaks the generated client here.
package openapiclient_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/services/payments-api/paymentsserver"
	"github.com/paysched/paysched/test/nodetest"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestGeneratedClient(t *testing.T) {
	nodetest.Require(t, "the generated-client test", "node", "npm", "npx")
	base := startAPI(t)
	tok, err := auth.Mint([]byte(secret), auth.DefaultIssuer, auth.DefaultAudience, "client-test", false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	dir := nodetest.Install(t, "package.json", "package-lock.json", "driver.mjs")
	// The generator reads the document from the running server, as a client
	// team would.
	nodetest.Run(t, dir, nil, "npx", "--no-install", "swagger-typescript-api", "generate",
		"--path", base+"/openapi.json", "--output", filepath.Join(dir, "gen"), "--name", "api.js",
		"--js", "--disable-throw-on-error", "--silent")
	out := nodetest.Run(t, dir, []string{"PAYSCHED_BASE=" + base, "PAYSCHED_TOKEN=" + tok, "PAYSCHED_GEN=" + filepath.Join(dir, "gen", "api.js")},
		"node", "driver.mjs")
	t.Logf("driver:\n%s", out)
}

const secret = "openapiclient-secret"

// startAPI runs a payments-api in process over a fresh database and returns
// its REST base URL.
func startAPI(t *testing.T) string {
	t.Helper()
	cfg := paymentsserver.Config{
		DatabaseURL: pgtest.NewURL(t),
		DBMaxConns:  8,
		Auth: auth.Config{HS256Secret: []byte(secret), Issuer: auth.DefaultIssuer,
			Audience: auth.DefaultAudience},
		Rules:        payments.Rules{DefaultCurrency: "EUR", AmountCap: 1_000_000, Horizon: 365 * 24 * time.Hour},
		CursorSecret: []byte("cursor"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := paymentsserver.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl := l.HTTP
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("payments-api: %v", err)
		}
	})
	return "http://" + hl.Addr().String()
}
