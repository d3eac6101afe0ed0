// Package e2e runs the real binaries as separate processes: migrate, then
// payments-api, driven by payctl over gRPC and by plain HTTP over REST.
package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/test/freeport"
	"github.com/paysched/paysched/test/pgtest"
)

// TestMain runs the binaries in development mode (PAYSCHED_DEV): the test
// database and Kafka are plaintext on loopback. The production-mode tests
// turn it off with --dev=false.
func TestMain(m *testing.M) {
	_ = os.Setenv("PAYSCHED_DEV", "1")
	dir, err := os.MkdirTemp("", "paysched-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bins.dir = dir
	code := pgtest.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// binaries are every binary the tests run, built together once per run of
// the package, at the first test that asks: each test building (and
// linking) its own set made the same binaries again and again, minutes of
// a loaded machine's CPU.
var binaries = []string{"./services/...", "./tools/cmd/gateway-sim", "./tools/cmd/kafka"}

// bins is where binaries are built, and how their build went.
var bins struct {
	once sync.Once
	dir  string
	err  error
}

// build returns the directory holding the binaries of pkgs, each one of
// binaries (all of them are built at the first call).
func build(t *testing.T, pkgs ...string) string {
	t.Helper()
	bins.once.Do(func() {
		cmd := exec.Command("go", append([]string{"build", "-o", bins.dir + "/"}, binaries...)...)
		cmd.Dir = pgtest.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	for _, p := range pkgs {
		if strings.HasSuffix(p, "/...") {
			continue
		}
		if _, err := os.Stat(filepath.Join(bins.dir, path.Base(p))); err != nil {
			t.Fatalf("%s is not among the binaries built for the tests (add it to binaries): %v", p, err)
		}
	}
	return bins.dir
}

// freeAddr reserves an address for a server in another process (see
// test/freeport: ports from the kernel's ephemeral range got taken meanwhile).
func freeAddr(t *testing.T) string {
	a, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestBinariesEndToEnd(t *testing.T) {
	bin := build(t, "./services/migrate", "./services/payments-api", "./services/payctl")
	db := pgtest.NewEmptyURL(t)
	for range 2 { // migrate creates the database, and a second run is a no-op
		if out, err := exec.Command(filepath.Join(bin, "migrate"), "--database-url", db).CombinedOutput(); err != nil {
			t.Fatalf("migrate: %v\n%s", err, out)
		}
	}
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	api := exec.Command(filepath.Join(bin, "payments-api"))
	api.Env = append(os.Environ(), "PAYSCHED_DATABASE_URL="+db, "PAYSCHED_HTTP_ADDR="+httpAddr,
		"PAYSCHED_GRPC_ADDR="+grpcAddr, "PAYSCHED_METRICS_ADDR="+freeAddr(t), "PAYSCHED_JWT_SECRET=e2e-secret")
	var logs bytes.Buffer
	api.Stdout, api.Stderr = &logs, &logs
	if err := api.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- api.Wait() }()
	defer func() {
		if api.ProcessState == nil {
			_ = api.Process.Kill()
		}
	}()

	payctl := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, "payctl"), append([]string{"--api", grpcAddr, "--jwt-secret", "e2e-secret", "--actor", "erin"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("payctl %v: %v\n%s\napi logs:\n%s", args, err, out, logs.String())
		}
		return out
	}
	payctl("health", "--wait", "20s")

	var created struct{ Payment map[string]any }
	if err := json.Unmarshal(payctl("create", "--json", "--payee", "frank", "--amount", "2500", "--due", "10m",
		"--idempotency-key", "e2e-1"), &created); err != nil {
		t.Fatal(err)
	}
	id, _ := created.Payment["paymentId"].(string)
	if id == "" || created.Payment["status"] != "PENDING" {
		t.Fatalf("created: %v", created)
	}
	if out := payctl("get", id); !strings.Contains(string(out), "PENDING") || !strings.Contains(string(out), "frank") {
		t.Fatalf("get: %s", out)
	}
	if out := payctl("list"); !strings.Contains(string(out), id) {
		t.Fatalf("list: %s", out)
	}

	// REST against the same process, with a token minted as payctl does.
	tok, _ := auth.Mint([]byte("e2e-secret"), auth.DefaultIssuer, auth.DefaultAudience, "erin", false, time.Minute)
	// One body for both: a replay is the same request (made twice, a due
	// time read from the clock crosses a second now and then, and the
	// second is another request under the same key: 409).
	b := fmt.Sprintf(`{"payee":"gina","amount":990,"dueAt":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	post := func() (int, string) {
		req, _ := http.NewRequest("POST", "http://"+httpAddr+"/v1/scheduled-payments", strings.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "rest-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	c1, b1 := post()
	c2, b2 := post()
	if c1 != http.StatusCreated || c2 != c1 || b1 != b2 {
		t.Fatalf("REST create/replay: %d %s / %d %s", c1, b1, c2, b2)
	}

	var cancelled struct{ Payment map[string]any }
	if err := json.Unmarshal(payctl("cancel", "--json", id), &cancelled); err != nil || cancelled.Payment["status"] != "CANCELLED" {
		t.Fatalf("cancel: %v %v", err, cancelled)
	}

	// SIGTERM: a graceful, zero-status exit.
	_ = api.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("payments-api exit: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("payments-api did not stop on SIGTERM")
	}
	if !strings.Contains(logs.String(), "payments-api stopped") {
		t.Fatalf("no shutdown log:\n%s", logs.String())
	}
}
