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
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/test/pgtest"
)

// RequireEnv set to 1 makes a missing node or npm a failure, not a skip
// (deploy/local/test.sh sets it).
const RequireEnv = "PAYSCHED_REQUIRE_NODE"

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestGeneratedClient(t *testing.T) {
	for _, tool := range []string{"node", "npm", "npx"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(RequireEnv) == "1" {
				t.Fatalf("%s is required (%s=1): %v", tool, RequireEnv, err)
			}
			t.Skipf("%s not found: install Node 20 and npm to run the generated-client test", tool)
		}
	}
	base := startAPI(t)
	tok, err := auth.Mint([]byte(secret), auth.DefaultIssuer, auth.DefaultAudience, "client-test", false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// Work on a copy so that the repository gets no node_modules; npm's
	// cache (~/.npm unless npm_config_cache says otherwise) makes the
	// install cheap after the first run.
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "driver.mjs"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, nil, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
	// The generator reads the document from the running server, as a client
	// team would.
	run(t, dir, nil, "npx", "--no-install", "swagger-typescript-api", "generate",
		"--path", base+"/openapi.json", "--output", filepath.Join(dir, "gen"), "--name", "api.js",
		"--js", "--disable-throw-on-error", "--silent")
	out := run(t, dir, []string{"PAYSCHED_BASE=" + base, "PAYSCHED_TOKEN=" + tok, "PAYSCHED_GEN=" + filepath.Join(dir, "gen", "api.js")},
		"node", "driver.mjs")
	t.Logf("driver:\n%s", out)
}

// run runs a command in dir and fails t with its output if it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

const secret = "openapiclient-secret"

// startAPI runs a payments-api in process over a fresh database and returns
// its REST base URL.
func startAPI(t *testing.T) string {
	t.Helper()
	cfg := server.Config{
		DatabaseURL: pgtest.NewURL(t),
		DBMaxConns:  8,
		Auth: auth.Config{HS256Secret: []byte(secret), Issuer: auth.DefaultIssuer,
			Audience: auth.DefaultAudience},
		Rules:        payments.Rules{DefaultCurrency: "EUR", AmountCap: 1_000_000, Horizon: 365 * 24 * time.Hour},
		CursorSecret: []byte("cursor"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, gl, hl) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("payments-api: %v", err)
		}
	})
	return "http://" + hl.Addr().String()
}
