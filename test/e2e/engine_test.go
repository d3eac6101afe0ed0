package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/test/pgtest"
)

type proc struct {
	name string
	cmd  *exec.Cmd
	out  *output
	done chan struct{} // closed when the process has exited
	err  error
}

// output collects a process's stdout and stderr; a failing test may read
// it while the process still writes.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

// String returns what the process has written so far.
func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

type procs struct {
	t   *testing.T
	bin string
	env []string
	mu  sync.Mutex
	all []*proc
}

func (ps *procs) start(name, binary string, args ...string) *proc {
	ps.t.Helper()
	cmd := exec.Command(filepath.Join(ps.bin, binary), args...)
	cmd.Env = append(os.Environ(), ps.env...)
	p := &proc{name: name, cmd: cmd, out: &output{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		ps.t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) error {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit after %v", p.name, sig)
		return nil
	}
}

// exited logs the output of every process that has already exited (a
// failed start: a port taken meanwhile, a bad flag), for a failing test.
func (ps *procs) exited() {
	for _, p := range ps.all {
		select {
		case <-p.done: // its output is complete: safe to read
			ps.t.Logf("%s exited (%v):\n%s", p.name, p.err, tail(p.out.String()))
		default:
		}
	}
}

func (ps *procs) stopAll() {
	for _, p := range ps.all {
		_ = p.cmd.Process.Signal(syscall.SIGTERM) // a no-op for those already gone
	}
	for _, p := range ps.all {
		t0 := time.Now()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
		}
		if d := time.Since(t0); d > 2*time.Second {
			ps.t.Logf("%s took %s to stop:\n%s", p.name, d, tail(p.out.String()))
		}
	}
}

// TestEngineProcessesSurviveKillsAndSIGTERM runs every engine process as a
// real binary, kills an executor with SIGKILL and stops the sweeper with
// SIGTERM mid-spike, restarts them, and checks that every payment ends
// terminal with exactly one charge per completed payment.
func TestEngineProcessesSurviveKillsAndSIGTERM(t *testing.T) {
	t0 := time.Now()
	bin := build(t, "./services/migrate", "./services/payments-api", "./services/payctl", "./tools/cmd/gateway-sim",
		"./services/executor", "./services/sweeper", "./services/reaper")
	t.Logf("%s built", time.Since(t0))
	db := pgtest.NewEmptyURL(t)
	if out, err := exec.Command(filepath.Join(bin, "migrate"), "--database-url", db).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	t.Logf("%s migrated", time.Since(t0))
	ps := &procs{t: t, bin: bin, env: []string{"PAYSCHED_DATABASE_URL=" + db, "PAYSCHED_JWT_SECRET=e2e"}}
	defer ps.stopAll()
	apiGRPC, apiHTTP, gw := freeAddr(t), freeAddr(t), freeAddr(t)
	ex1, ex2 := freeAddr(t), freeAddr(t)
	ps.start("payments-api", "payments-api", "--grpc-addr", apiGRPC, "--http-addr", apiHTTP, "--metrics-addr", freeAddr(t))
	ps.start("gateway-sim", "gateway-sim", "--ledger", "memory", "--grpc-addr", gw, "--http-addr", freeAddr(t),
		"--latency-min-ms", "5", "--latency-max-ms", "30", "--timeout-after-commit-rate", "0.05")
	execArgs := func(addr string) []string {
		return []string{"--grpc-addr", addr, "--http-addr", freeAddr(t), "--gateway-addr", gw, "--backoff", "200ms,200ms,200ms,200ms,200ms",
			"--charge-timeout", "500ms", "--probe-timeout", "300ms", "--lease-margin", "200ms"}
	}
	e1 := ps.start("executor-1", "executor", execArgs(ex1)...)
	ps.start("executor-2", "executor", execArgs(ex2)...)
	sweeperArgs := []string{"--http-addr", freeAddr(t), "--executors", ex1 + "," + ex2, "--lease", "2s", "--batch", "50", "--interval", "100ms"}
	sw := ps.start("sweeper", "sweeper", sweeperArgs...)
	ps.start("reaper", "reaper", "--http-addr", freeAddr(t), "--interval", "200ms")
	for _, addr := range []string{apiGRPC, gw, ex1, ex2} {
		if out, err := exec.Command(filepath.Join(bin, "payctl"), "--api", addr, "health", "--wait", "30s").CombinedOutput(); err != nil {
			t.Fatalf("health %s: %v %s", addr, err, out)
		}
	}

	t.Logf("%s healthy", time.Since(t0))
	cc, err := grpc.NewClient(apiGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tok, _ := auth.Mint([]byte("e2e"), auth.DefaultIssuer, auth.DefaultAudience, "erin", false, time.Hour)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	const n = 1500
	due := time.Now().Add(2 * time.Second)
	var items []*payschedv1.CreateScheduledPaymentRequest
	for i := range n {
		payee := fmt.Sprint("shop-", i)
		if i%25 == 0 {
			payee = "decline-" + payee
		}
		items = append(items, &payschedv1.CreateScheduledPaymentRequest{Payee: payee, Amount: int64(100 + i), Currency: "EUR",
			DueAt: timestamppb.New(due.Add(time.Duration(i) * time.Millisecond)), RequestId: fmt.Sprint("k", i)})
	}
	if _, err := payschedv1.NewPaymentsServiceClient(cc).BatchCreateScheduledPayments(ctx,
		&payschedv1.BatchCreateScheduledPaymentsRequest{Items: items[:1000]}); err != nil {
		t.Fatal(err)
	}
	if _, err := payschedv1.NewPaymentsServiceClient(cc).BatchCreateScheduledPayments(ctx,
		&payschedv1.BatchCreateScheduledPaymentsRequest{Items: items[1000:]}); err != nil {
		t.Fatal(err)
	}

	time.Sleep(time.Until(due) + 500*time.Millisecond)
	_ = e1.signal(t, syscall.SIGKILL) // crash: its claims come back through lease expiry
	t.Logf("%s killed executor-1", time.Since(t0))
	t1 := time.Now()
	if err := sw.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("sweeper exit on SIGTERM: %v\n%s", err, sw.out.String())
	}
	t.Logf("sweeper stopped in %s", time.Since(t1))
	ps.start("executor-1b", "executor", execArgs(ex1)...)
	ps.start("sweeper-b", "sweeper", sweeperArgs...)

	pool, err := pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var open int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM payments WHERE status IN ('PENDING','PROCESSING')`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d payments still open", open)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var completed, failed, other int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE status='COMPLETED'), count(*) FILTER (WHERE status='FAILED'),
		count(*) FILTER (WHERE status NOT IN ('COMPLETED','FAILED')) FROM payments`).Scan(&completed, &failed, &other); err != nil {
		t.Fatal(err)
	}
	gc, err := grpc.NewClient(gw, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	rep, err := gatewayv1.NewGatewayAdminServiceClient(gc).Report(context.Background(), &gatewayv1.ReportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("E2E_DUMP") != "" {
		for _, p := range ps.all {
			_ = os.WriteFile("/tmp/e2e-"+p.name+".log", []byte(p.out.String()), 0o644)
		}
	}
	t.Logf("%s all terminal", time.Since(t0))
	t.Logf("completed=%d failed=%d other=%d charges=%d succeeded=%d", completed, failed, other, rep.GetCharges(), rep.GetSucceeded())
	if rep.GetSucceeded() != int64(completed) || len(rep.GetDoubleCharged()) != 0 || failed != n/25 || other != 0 {
		t.Fatalf("money: completed=%d failed=%d other=%d gateway succeeded=%d double=%v", completed, failed, other, rep.GetSucceeded(), rep.GetDoubleCharged())
	}
	// Every attempt ends with an outcome: an executor killed after writing
	// its attempt row leaves it to the reaper (lease expiry, or orphan
	// closing when the lease had already been taken back).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var unfinished int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM payment_attempts WHERE finished_at IS NULL`).Scan(&unfinished); err != nil {
			t.Fatal(err)
		}
		if unfinished == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts never recorded an outcome", unfinished)
		}
	}
}

func tail(s string) string {
	if len(s) > 1500 {
		return s[len(s)-1500:]
	}
	return s
}
