package e2e_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/test/pgtest"
)

// span is what the fake collector keeps of an exported span.
type span struct {
	service, name, trace, id, parent string
}

// otlpCollector receives OTLP/gRPC trace exports.
type otlpCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []span
}

func (c *otlpCollector) Export(_ context.Context, r *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range r.GetResourceSpans() {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, span{service: service, name: s.GetName(), trace: hex.EncodeToString(s.GetTraceId()),
					id: hex.EncodeToString(s.GetSpanId()), parent: hex.EncodeToString(s.GetParentSpanId())})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// find returns the spans matching service and name (a prefix when it ends
// in "*"), in trace (empty: any).
func (c *otlpCollector) find(service, name, trace string) []span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []span
	for _, s := range c.spans {
		nameOK := s.name == name || strings.HasSuffix(name, "*") && strings.HasPrefix(s.name, strings.TrimSuffix(name, "*"))
		if s.service == service && nameOK && (trace == "" || s.trace == trace) {
			out = append(out, s)
		}
	}
	return out
}

func (c *otlpCollector) dump() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, s := range c.spans {
		fmt.Fprintf(&b, "%s %s trace=%s id=%s parent=%s\n", s.service, s.name, s.trace, s.id, s.parent)
	}
	return b.String()
}

// TestTracesAcrossBinaries runs the real binaries with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at a collector in this test: a REST
// create continues the caller's trace down to its INSERT, and the payment's
// execution is one trace from the sweeper's batch through the executor to
// the gateway's Charge. The spans arrive by the time the processes have
// stopped on SIGTERM (flushed on the way out).
func TestTracesAcrossBinaries(t *testing.T) {
	col := &otlpCollector{}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	bin := build(t, "./services/migrate", "./services/payments-api", "./services/payctl", "./tools/cmd/gateway-sim",
		"./services/executor", "./services/sweeper")
	db := pgtest.NewEmptyURL(t)
	if out, err := exec.Command(filepath.Join(bin, "migrate"), "--database-url", db).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	ps := &procs{t: t, bin: bin, env: []string{"PAYSCHED_DATABASE_URL=" + db, "PAYSCHED_JWT_SECRET=e2e",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + lis.Addr().String(), "OTEL_SERVICE_NAME=", "OTEL_BSP_SCHEDULE_DELAY=200"}}
	defer ps.stopAll()
	apiGRPC, apiHTTP, gw, ex := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	ps.start("payments-api", "payments-api", "--grpc-addr", apiGRPC, "--http-addr", apiHTTP, "--metrics-addr", freeAddr(t))
	ps.start("gateway-sim", "gateway-sim", "--ledger", "memory", "--grpc-addr", gw, "--http-addr", freeAddr(t))
	ps.start("executor", "executor", "--grpc-addr", ex, "--http-addr", freeAddr(t), "--gateway-addr", gw)
	ps.start("sweeper", "sweeper", "--http-addr", freeAddr(t), "--executors", ex, "--interval", "100ms")
	for _, addr := range []string{apiGRPC, gw, ex} {
		if out, err := exec.Command(filepath.Join(bin, "payctl"), "--api", addr, "health", "--wait", "30s").CombinedOutput(); err != nil {
			ps.exited()
			t.Fatalf("health %s: %v %s", addr, err, out)
		}
	}

	// A REST create inside the caller's trace.
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	tok, _ := auth.Mint([]byte("e2e"), auth.DefaultIssuer, auth.DefaultAudience, "erin", false, time.Minute)
	// Whole seconds would cut up to a second off: nanoseconds, and 2 s of margin.
	body := fmt.Sprintf(`{"payee":"gina","amount":990,"currency":"EUR","dueAt":%q}`, time.Now().Add(2*time.Second).UTC().Format(time.RFC3339Nano))
	req, _ := http.NewRequest("POST", "http://"+apiHTTP+"/v1/scheduled-payments", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "traced-1")
	req.Header.Set("traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", res.StatusCode, b)
	}

	pool, err := pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var status string
		if err := pool.QueryRow(context.Background(), `SELECT status FROM payments`).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status == "COMPLETED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("payment still %s", status)
		}
	}
	ps.stopAll() // SIGTERM: every process flushes its spans before exiting

	one := func(service, name, trace string) span {
		t.Helper()
		got := col.find(service, name, trace)
		if len(got) == 0 {
			t.Fatalf("no %s span %q in trace %q; collector has:\n%s", service, name, trace, col.dump())
		}
		return got[0]
	}
	childOf := func(child, parent span) {
		t.Helper()
		if child.trace != parent.trace || child.parent != parent.id {
			t.Errorf("%s/%s (trace %s parent %s) is not a child of %s/%s (trace %s id %s)", child.service, child.name,
				child.trace, child.parent, parent.service, parent.name, parent.trace, parent.id)
		}
	}

	// API -> DB, continuing the caller's trace.
	rest := one("payments-api", "POST /v1/scheduled-payments", callerTrace)
	if rest.parent != "00f067aa0ba902b7" {
		t.Errorf("REST span's parent %s, want the caller's", rest.parent)
	}
	batch := one("payments-api", "store.create_batch", callerTrace)
	childOf(batch, rest)
	var insert span
	for _, s := range col.find("payments-api", "*", callerTrace) {
		if s.parent == batch.id {
			insert = s
		}
	}
	if insert.name == "" {
		t.Errorf("no statement under store.create_batch:\n%s", col.dump())
	}

	// Sweeper -> executor -> gateway, one trace.
	dispatch := one("sweeper", "sweeper.dispatch", "")
	exClient := one("sweeper", "paysched.internal.v1.ExecutorService/Execute", dispatch.trace)
	childOf(exClient, dispatch)
	exServer := one("executor", "paysched.internal.v1.ExecutorService/Execute", dispatch.trace)
	childOf(exServer, exClient)
	charge := one("executor", "gateway.v1.GatewayService/Charge", dispatch.trace)
	childOf(charge, exServer)
	gwServer := one("gateway-sim", "gateway.v1.GatewayService/Charge", dispatch.trace)
	childOf(gwServer, charge)
	var stmts int
	for _, s := range col.find("executor", "*", dispatch.trace) {
		if s.parent == exServer.id && !strings.Contains(s.name, "/") {
			stmts++
		}
	}
	// The batch's read; its outcomes are written by the completers, many
	// batches per statement, outside any one batch's span.
	if stmts < 1 {
		t.Errorf("%d statements under the executor's Execute span, want at least 1:\n%s", stmts, col.dump())
	}
	// Health checks are not traced.
	if got := col.find("gateway-sim", "grpc.health.v1.Health/*", ""); len(got) > 0 {
		t.Errorf("health checks traced: %v", got)
	}
}
