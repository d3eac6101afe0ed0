// Package pgtest gives tests a real Postgres: one private cluster per test
// run (started here, or by `make test` and passed in
// PAYSCHED_TEST_ADMIN_URL), and an isolated database per caller, cloned from
// a template that the migrations built once.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/store/schema"
	"github.com/paysched/paysched/test/freeport"
)

// EnvAdminURL names a running cluster's superuser URL; when unset, Main
// starts a private cluster for the package and stops it afterwards.
const EnvAdminURL = "PAYSCHED_TEST_ADMIN_URL"

var (
	adminURL string
	mu       sync.Mutex
	counter  int
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Main is TestMain for packages that use Postgres.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain with its own cleanup after the tests: it runs
// them and returns the exit code.
func Run(m *testing.M) int {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	return code
}

func run(m *testing.M) (int, error) {
	adminURL = os.Getenv(EnvAdminURL)
	if adminURL == "" {
		url, dir, err := startCluster()
		if dir != "" {
			defer stopCluster(dir)
		}
		if err != nil {
			return 0, err
		}
		adminURL = url
	}
	return m.Run(), nil
}

func startCluster() (url, dir string, err error) {
	dir, err = os.MkdirTemp("", "paysched-pgtest-")
	if err != nil {
		return "", "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", dir, err
	}
	port, err := freeport.Port()
	if err != nil {
		return "", dir, err
	}
	script := filepath.Join(RepoRoot(), "deploy", "local", "pg.sh")
	cmd := exec.Command(script, "start", dir, fmt.Sprint(port))
	cmd.Env = append(os.Environ(), "PAYSCHED_PG_FAST=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", dir, fmt.Errorf("start postgres: %v\n%s", err, out)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), dir, nil
}

func stopCluster(dir string) {
	script := filepath.Join(RepoRoot(), "deploy", "local", "pg.sh")
	_ = exec.Command(script, "stop", dir).Run()
	if data, err := os.ReadFile(filepath.Join(dir, "datadir")); err == nil {
		if d := strings.TrimSpace(string(data)); strings.HasPrefix(d, "/tmp/") {
			_ = os.RemoveAll(d)
		}
	}
	_ = os.RemoveAll(dir)
}

// templateName changes whenever the migrations do, so a reused cluster never
// serves a stale schema, and with the UTC day, so its partitions (the
// migration makes yesterday's to a year ahead) are never a day behind.
func templateName() (string, error) {
	migs, err := schema.All()
	if err != nil {
		return "", err
	}
	hooks, err := schema.AllWebhooks()
	if err != nil {
		return "", err
	}
	migs = append(migs, hooks...)
	h := sha256.New()
	for _, m := range migs {
		h.Write([]byte(m.Name))
		h.Write([]byte(m.SQL))
	}
	return "paysched_tpl_" + hex.EncodeToString(h.Sum(nil))[:12] + "_" + time.Now().UTC().Format("20060102"), nil
}

// ensureTemplate builds the migrated template once per cluster, under an
// advisory lock because test packages run in parallel processes.
func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	name, err := templateName()
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(4242)`); err != nil {
		return "", err
	}
	defer func() { _, _ = admin.Exec(ctx, `SELECT pg_advisory_unlock(4242)`) }()
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+building); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+building); err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, withDB(adminURL, building))
	if err != nil {
		return "", err
	}
	_, err = schema.Up(ctx, conn)
	if err == nil {
		// The webhooks' tables beside the schedule's, as in development.
		_, err = schema.UpWebhooks(ctx, conn)
	}
	conn.Close(ctx)
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+building+` RENAME TO `+name); err != nil {
		return "", err
	}
	return name, nil
}

func withDB(url, db string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, db)
}

// NewURL creates a fresh, migrated database and returns its URL. It is
// dropped when the test ends.
func NewURL(t testing.TB) string {
	t.Helper()
	if adminURL == "" {
		t.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("pgtest: connect admin: %v", err)
	}
	defer admin.Close(ctx)
	tpl, err := ensureTemplate(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: template: %v", err)
	}
	name := newName("t")
	// Cloning needs the template idle; retry briefly if another package's
	// clone is reading it at this instant.
	for i := 0; ; i++ {
		_, err = admin.Exec(ctx, `CREATE DATABASE `+name+` TEMPLATE `+tpl+` STRATEGY FILE_COPY`)
		if err == nil || i == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	dropAtEnd(t, name)
	return withDB(adminURL, name)
}

// newName is a database name unique across the test processes of a run.
func newName(prefix string) string {
	mu.Lock()
	defer mu.Unlock()
	counter++
	return fmt.Sprintf("%s_%d_%d_%d", prefix, os.Getpid(), counter, time.Now().UnixNano()%1e6)
}

func dropAtEnd(t testing.TB, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, adminURL); err == nil {
			_, _ = c.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
			c.Close(ctx)
		}
	})
}

// NewEmptyURL returns the URL of a database that does not exist yet (the
// migrate command creates it), dropped when the test ends.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	if adminURL == "" {
		t.Fatal("pgtest: call pgtest.Main from TestMain")
	}
	name := newName("e")
	dropAtEnd(t, name)
	return withDB(adminURL, name)
}

// NewPool returns a pool on a fresh, migrated database, closed at the end.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
