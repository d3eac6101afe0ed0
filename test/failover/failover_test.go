package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/freeport"
	"github.com/paysched/paysched/test/pgtest"
)

const jwtSecret = "failover-test-secret-of-32-bytes!!"

// cluster runs deploy/local/pg.sh: durable clusters (fsync on).
type cluster struct {
	t  *testing.T
	pg string
}

func (c cluster) sh(args ...string) {
	c.t.Helper()
	cmd := exec.Command(c.pg, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PAYSCHED_PG_FAST=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("pg.sh %v: %v\n%s", args, err, out)
	}
}

// own starts a cluster in a fresh directory and removes it at the end.
func (c cluster) own(args ...string) string {
	c.t.Helper()
	dir := c.t.TempDir()
	c.t.Cleanup(func() {
		_ = exec.Command(c.pg, "stop", dir).Run()
		if real, err := os.ReadFile(filepath.Join(dir, "datadir")); err == nil && strings.HasPrefix(string(real), "/tmp/") {
			_ = os.RemoveAll(strings.TrimSpace(string(real)))
		}
	})
	c.sh(append([]string{args[0], dir}, args[1:]...)...)
	return dir
}

func port(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func addr(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(port(t)) }

// service runs one real binary, its log kept for a failure.
func service(t *testing.T, bin, name string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("--- %s log (tail) ---\n%s", name, b)
		}
	})
}

// acks is what clients were told, to be found on the new primary.
type acks struct {
	mu        sync.Mutex
	created   map[uuid.UUID]bool
	cancelled map[uuid.UUID]bool
	// outcomes an executor reported written: (payment, attempt) -> result.
	outcomes map[store.Applied]internalv1.Result
}

// TestAcknowledgedWritesSurviveAFailover: payments are created through
// payments-api, some cancelled, and executed by the real executor (the
// test claims and dispatches as a sweeper does, to see each outcome the
// executor reports written), against a primary that waits for a
// synchronous standby. The standby's link is cut (a partition), then the
// primary is killed -9 and the standby promoted, as CloudNativePG does.
// On the new primary: every create answered 201, every cancel answered 200
// and every outcome reported written is there, and no cancelled payment
// was charged. Without synchronous replication the writes acknowledged
// during the partition are lost (the test fails).
func TestAcknowledgedWritesSurviveAFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	c := cluster{t: t, pg: filepath.Join(pgtest.RepoRoot(), "deploy", "local", "pg.sh")}
	pPort, sPort := port(t), port(t)
	primary := c.own("start", strconv.Itoa(pPort))
	// The standby reaches the primary through a proxy, so the test can
	// partition them.
	link, err := NewProxy("127.0.0.1:" + strconv.Itoa(pPort))
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	standby := c.own("standby", strconv.Itoa(sPort), strconv.Itoa(link.Port()))
	c.sh("synchronous", strconv.Itoa(pPort), "on")
	waitSynchronous(t, pPort)

	// The services reach "the primary" through a proxy that follows it.
	rw, err := NewProxy("127.0.0.1:" + strconv.Itoa(pPort))
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	dbURL := "postgres://postgres@" + rw.Addr() + "/paysched?sslmode=disable"
	bin := build(t)
	if out, err := exec.Command(filepath.Join(bin, "migrate"), "--dev", "--database-url", dbURL).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	gw, apiHTTP, apiGRPC, ex := addr(t), addr(t), addr(t), addr(t)
	service(t, bin, "gateway-sim", "--ledger", "memory", "--grpc-addr", gw, "--http-addr", addr(t))
	service(t, bin, "payments-api", "--dev", "--database-url", dbURL, "--http-addr", apiHTTP, "--grpc-addr", apiGRPC, "--metrics-addr", addr(t),
		"--jwt-secret", jwtSecret)
	service(t, bin, "executor", "--dev", "--database-url", dbURL, "--grpc-addr", ex, "--http-addr", addr(t), "--gateway-addr", gw,
		"--backoff", "200ms,200ms,200ms", "--charge-timeout", "1s", "--probe-timeout", "500ms")
	service(t, bin, "reaper", "--dev", "--database-url", dbURL, "--http-addr", addr(t), "--interval", "500ms")
	waitHTTP(t, "http://"+apiHTTP+"/healthz")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := &acks{created: map[uuid.UUID]bool{}, cancelled: map[uuid.UUID]bool{}, outcomes: map[store.Applied]internalv1.Result{}}
	tok, _ := auth.Mint([]byte(jwtSecret), auth.DefaultIssuer, auth.DefaultAudience, "payer", false, time.Hour)
	load, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	toCancel := make(chan uuid.UUID, 10000)
	for w := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); create(load, t, apiHTTP, tok, w, a, toCancel) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); cancelSome(load, apiHTTP, tok, a, toCancel) }()
	sweepDone := make(chan struct{})
	sweepCtx, stopSweep := context.WithCancel(ctx)
	go func() { defer close(sweepDone); sweep(sweepCtx, t, dbURL, ex, a) }()

	time.Sleep(4 * time.Second)
	link.Pause() // the standby hears nothing more
	time.Sleep(1500 * time.Millisecond)
	c.sh("crash", primary)
	link.Cut()
	c.sh("promote", standby)
	rw.Switch("127.0.0.1:" + strconv.Itoa(sPort))
	t.Log("failed over")
	time.Sleep(3 * time.Second)
	stopLoad()
	wg.Wait()

	// Let the engine finish on the new primary.
	db, err := pgxpool.New(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/paysched?sslmode=disable", sPort))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var open int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE status IN ('PENDING', 'PROCESSING')`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d payments still open on the new primary", open)
		}
	}
	stopSweep()
	<-sweepDone

	a.mu.Lock()
	defer a.mu.Unlock()
	t.Logf("acknowledged: %d creates, %d cancels, %d outcomes", len(a.created), len(a.cancelled), len(a.outcomes))
	if len(a.created) < 50 || len(a.cancelled) < 5 || len(a.outcomes) < 50 {
		t.Fatalf("too little load to mean anything: %d creates, %d cancels, %d outcomes", len(a.created), len(a.cancelled), len(a.outcomes))
	}
	var lost []string
	for id := range a.created {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
			lost = append(lost, "create "+id.String())
		}
	}
	for id := range a.cancelled {
		var st string
		if err := db.QueryRow(ctx, `SELECT status FROM payments WHERE id = $1`, id).Scan(&st); err != nil || st != "CANCELLED" {
			lost = append(lost, fmt.Sprintf("cancel %s (now %q)", id, st))
		}
	}
	for k, res := range a.outcomes {
		var outcome, st string
		err := db.QueryRow(ctx, `SELECT coalesce(a.outcome, ''), p.status FROM payment_attempts a JOIN payments p ON p.id = a.payment_id
			WHERE a.payment_id = $1 AND a.attempt = $2`, k.ID, k.Attempt).Scan(&outcome, &st)
		if err != nil || outcome == "" || outcome == "ABANDONED" ||
			res == internalv1.Result_RESULT_SUCCEEDED && (outcome != "SUCCEEDED" || st != "COMPLETED") {
			lost = append(lost, fmt.Sprintf("outcome %s of %s attempt %d (now %q, %q)", res, k.ID, k.Attempt, outcome, st))
		}
	}
	if len(lost) > 0 {
		n := min(len(lost), 20)
		t.Fatalf("%d acknowledged writes are not on the new primary, e.g.:\n%s", len(lost), strings.Join(lost[:n], "\n"))
	}
	// No payment whose cancel was answered 200 was charged.
	sim := gatewayv1.NewGatewayServiceClient(dial(t, gw))
	for id := range a.cancelled {
		_, err := sim.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: id.String()})
		if !gateway.ProvenAbsent(err) {
			t.Fatalf("payment %s was cancelled (200) and the gateway holds a charge for it (%v)", id, err)
		}
	}
	rep, err := gatewayv1.NewGatewayAdminServiceClient(dial(t, gw)).Report(ctx, &gatewayv1.ReportRequest{})
	if err != nil || len(rep.GetDoubleCharged()) != 0 {
		t.Fatalf("gateway report %v %v", rep, err)
	}
}

func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./services/migrate", "./services/payments-api", "./services/executor",
		"./services/reaper", "./tools/cmd/gateway-sim")
	cmd.Dir = pgtest.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return dir
}

func dial(t *testing.T, a string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// waitSynchronous waits until the primary counts the standby as a
// synchronous one.
func waitSynchronous(t *testing.T, primaryPort int) {
	t.Helper()
	db, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", primaryPort))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var n int
		_ = db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_replication
			WHERE application_name = 'paysched_standby' AND sync_state IN ('sync', 'quorum') AND state = 'streaming'`).Scan(&n)
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the standby never became synchronous")
		}
	}
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if res, err := http.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered", url)
		}
	}
}

var client = &http.Client{Timeout: 15 * time.Second}

// create schedules payments until ctx ends: most due in a second or two,
// some later, to be cancelled. Every 201 is recorded.
func create(ctx context.Context, t *testing.T, api, tok string, w int, a *acks, toCancel chan<- uuid.UUID) {
	for i := 0; ctx.Err() == nil; i++ {
		later := rand.IntN(5) == 0
		due := time.Now().Add(time.Duration(1000+rand.IntN(1000)) * time.Millisecond)
		if later {
			due = time.Now().Add(8 * time.Second)
		}
		body := fmt.Sprintf(`{"payee":"bob","amount":%d,"currency":"USD","dueAt":%q}`, 100+i, due.UTC().Format(time.RFC3339Nano))
		req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), "POST", "http://"+api+"/v1/scheduled-payments", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("w%d-%d-%d", w, i, time.Now().UnixNano()))
		res, err := client.Do(req)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		var p struct {
			PaymentID string `json:"paymentId"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			t.Errorf("201 with %s", b)
			return
		}
		id := uuid.MustParse(p.PaymentID)
		a.mu.Lock()
		a.created[id] = true
		a.mu.Unlock()
		if later {
			select {
			case toCancel <- id:
			default:
			}
		}
	}
}

// cancelSome cancels the later payments; every 200 CANCELLED is recorded.
func cancelSome(ctx context.Context, api, tok string, a *acks, ids <-chan uuid.UUID) {
	for {
		var id uuid.UUID
		select {
		case <-ctx.Done():
			return
		case id = <-ids:
		}
		req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), "DELETE", "http://"+api+"/v1/scheduled-payments/"+id.String(), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := client.Do(req)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"CANCELLED"`)) {
			a.mu.Lock()
			a.cancelled[id] = true
			a.mu.Unlock()
		}
	}
}

// sweep claims due payments and dispatches them to the executor, as a
// sweeper does, recording every outcome the executor reports written.
func sweep(ctx context.Context, t *testing.T, dbURL, executor string, a *acks) {
	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Error(err)
		return
	}
	defer db.Close()
	ex := internalv1.NewExecutorServiceClient(dial(t, executor))
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		claimed, err := store.Claim(cctx, db, "failover-sweeper", 5*time.Second, 100)
		cancel()
		if err != nil || len(claimed) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		req := &internalv1.ExecuteRequest{SweeperId: "failover-sweeper"}
		attempts := map[string]int32{}
		for _, cl := range claimed {
			req.Items = append(req.Items, &internalv1.WorkItem{PaymentId: cl.ID.String(), DueTime: timestamppb.New(cl.DueTime), Attempt: cl.Attempt})
			attempts[cl.ID.String()] = cl.Attempt
		}
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := ex.Execute(ectx, req)
		for err == nil {
			var msg *internalv1.ExecuteResponse
			if msg, err = st.Recv(); err != nil {
				break
			}
			a.mu.Lock()
			for _, o := range msg.GetOutcomes() {
				switch o.GetResult() {
				case internalv1.Result_RESULT_SUCCEEDED, internalv1.Result_RESULT_DECLINED, internalv1.Result_RESULT_RETRY:
					a.outcomes[store.Applied{ID: uuid.MustParse(o.GetPaymentId()), Attempt: attempts[o.GetPaymentId()]}] = o.GetResult()
				}
			}
			a.mu.Unlock()
		}
		cancel()
		if err != nil && !errors.Is(err, io.EOF) {
			time.Sleep(100 * time.Millisecond)
		}
	}
}
