package paymentsserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/services/admin-api/adminserver"
	"github.com/paysched/paysched/services/payments-api/paymentsserver"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testSecret = "test-secret"

type env struct {
	t    testing.TB
	base string
	// internal is the /metrics and /healthz listener's base URL.
	internal string
	cc       *grpc.ClientConn
	db       *pgxpool.Pool
}

func testConfig(url string) paymentsserver.Config {
	return paymentsserver.Config{
		DatabaseURL: url,
		DBMaxConns:  16,
		Auth: auth.Config{HS256Secret: []byte(testSecret), Issuer: auth.DefaultIssuer,
			Audience: auth.DefaultAudience},
		Rules:        payments.Rules{DefaultCurrency: "EUR", AmountCap: 1_000_000, Horizon: 365 * 24 * time.Hour},
		CursorSecret: []byte("cursor"),
	}
}

// start runs a payments-api in-process on free ports over a fresh database;
// opts adjust the test configuration.
func start(t testing.TB, opts ...func(*paymentsserver.Config)) *env {
	t.Helper()
	url := pgtest.NewURL(t)
	cfg := testConfig(url)
	for _, o := range opts {
		o(&cfg)
	}
	return run(t, url, func(ctx context.Context) (serving, error) {
		return paymentsserver.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	})
}

// startAdmin runs an admin-api (services/admin-api/adminserver) in-process on free
// ports over a fresh database; opts adjust the test configuration.
func startAdmin(t testing.TB, opts ...func(*adminserver.Config)) *env {
	t.Helper()
	url := pgtest.NewURL(t)
	cfg := adminserver.Config{DatabaseURL: url, DBMaxConns: 8,
		Auth: auth.Config{HS256Secret: []byte(testSecret), Issuer: auth.DefaultIssuer, AdminAudience: auth.DefaultAdminAudience}}
	for _, o := range opts {
		o(&cfg)
	}
	return run(t, url, func(ctx context.Context) (serving, error) {
		return adminserver.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	})
}

// serving is payments-api's or admin-api's server.
type serving interface {
	Serve(ctx context.Context, l server.Listeners) error
}

// run serves what build makes on free ports over the database at url.
func run(t testing.TB, url string, build func(context.Context) (serving, error)) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := build(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl, hl, il := l.GRPC, l.HTTP, l.Internal
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		db.Close()
		cancel()
		_ = <-done
	})
	return &env{t: t, base: "http://" + hl.Addr().String(), internal: "http://" + il.Addr().String(), cc: cc, db: db}
}

func token(t testing.TB, actor string) string {
	t.Helper()
	tok, err := auth.Mint([]byte(testSecret), auth.DefaultIssuer, auth.DefaultAudience, actor, false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type resp struct {
	code   int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, r.body)
	}
	return m
}

// reason returns the ErrorInfo reason of an error body.
func (r resp) reason(t *testing.T) string {
	for _, d := range r.json(t)["details"].([]any) {
		if m := d.(map[string]any); m["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" {
			return m["reason"].(string)
		}
	}
	return ""
}

// fields returns the BadRequest field names of an error body.
func (r resp) fields(t *testing.T) map[string]bool {
	out := map[string]bool{}
	for _, d := range r.json(t)["details"].([]any) {
		if m := d.(map[string]any); m["@type"] == "type.googleapis.com/google.rpc.BadRequest" {
			for _, fv := range m["fieldViolations"].([]any) {
				out[fv.(map[string]any)["field"].(string)] = true
			}
		}
	}
	return out
}

func (e *env) do(method, path, tok string, hdr map[string]string, body string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	checkContract(e.t, req, res.StatusCode, res.Header, b)
	return resp{code: res.StatusCode, header: res.Header, body: b}
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func future(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }
