// Package enginetest runs the engine's real components together — Postgres,
// gateway-sim, executors and sweepers over real gRPC, the reaper — and
// checks money outcomes scenario by scenario.
package enginetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/engine/executor"
	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/pkg/engine/reaper"
	"github.com/paysched/paysched/pkg/engine/sweeper"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
	"github.com/paysched/paysched/tools/gatewaysim"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type opts struct {
	executors int
	sweepers  int
	backoff   payment.Backoff
	lease     time.Duration
	faults    *gatewayv1.Faults
	chargeTO  time.Duration
	probeTO   time.Duration
	batch     int
	ceiling   float64
	wrapExec  func(i int, real internalv1.ExecutorServiceServer) internalv1.ExecutorServiceServer
	// wrapGW wraps the executors' gateway client (to watch or hold calls).
	wrapGW func(gateway.Gateway) gateway.Gateway
	// wrapDB wraps the executors' database (to slow it).
	wrapDB func(pgdb.DB) pgdb.DB
	// bounds for undecided charges (zero: never cancelled).
	bounds   gateway.Bounds
	noReaper bool
	// noSweeper starts the cluster with no sweeper: the test parks its
	// payments first and then calls startSweeper, so no claim races it.
	noSweeper bool
	// payeeRate paces charges per payee in each executor (0: none).
	payeeRate float64
	// completeWait is the executors' --complete-wait (0: 25ms, the
	// flag's default; negative: none); margin their --lease-margin (0:
	// 100ms).
	completeWait, margin time.Duration
	// interval and cooldown are the sweepers' --interval and
	// --claim-cooldown (0: 50ms and 25ms).
	interval, cooldown time.Duration
	// maxRequest is the executors' and operators' --gateway-max-request
	// (0: an absence counts at once).
	maxRequest time.Duration
}

type cluster struct {
	t       *testing.T
	db      *pgxpool.Pool
	sim     *gatewaysim.Server
	simAddr string
	admin   gatewayv1.GatewayAdminServiceClient
	execs   []string
	cancel  []context.CancelFunc
	wg      sync.WaitGroup
	o       opts
}

func serve(t *testing.T, register func(*grpc.Server)) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), gs
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func newCluster(t *testing.T, o opts) *cluster {
	t.Helper()
	if o.executors == 0 {
		o.executors = 1
	}
	if o.backoff == nil {
		o.backoff = payment.Backoff{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}
	}
	if o.lease == 0 {
		o.lease = 30 * time.Second
	}
	if o.chargeTO == 0 {
		o.chargeTO = 2 * time.Second
	}
	if o.probeTO == 0 {
		o.probeTO = time.Second
	}
	if o.batch == 0 {
		o.batch = 100
	}
	switch {
	case o.completeWait == 0:
		o.completeWait = 25 * time.Millisecond
	case o.completeWait < 0:
		o.completeWait = 0
	}
	if o.margin == 0 {
		o.margin = 100 * time.Millisecond
	}
	if o.interval == 0 {
		o.interval = 50 * time.Millisecond
	}
	if o.cooldown == 0 {
		o.cooldown = min(25*time.Millisecond, o.interval)
	}
	c := &cluster{t: t, db: pgtest.NewPool(t), o: o}
	c.sim = gatewaysim.New(gatewaysim.NewMemLedger(), o.faults)
	c.sim.Linger = time.Millisecond // as gateway-sim's --answer-linger
	c.simAddr, _ = serve(t, func(gs *grpc.Server) {
		gatewayv1.RegisterGatewayServiceServer(gs, c.sim)
		gatewayv1.RegisterGatewayAdminServiceServer(gs, c.sim)
	})
	c.admin = gatewayv1.NewGatewayAdminServiceClient(dial(t, c.simAddr))
	// The executors share one client, as an executor's callers do: charges
	// go over its Charges stream.
	grpcGW := gateway.NewGRPC(dial(t, c.simAddr))
	grpcGW.Linger = time.Millisecond // as --gateway-linger
	t.Cleanup(grpcGW.Close)
	var gw gateway.Gateway = grpcGW
	if o.wrapGW != nil {
		gw = o.wrapGW(gw)
	}
	var exDB pgdb.DB = c.db
	if o.wrapDB != nil {
		exDB = o.wrapDB(c.db)
	}
	for i := range o.executors {
		ex, err := executor.New(executor.Config{ID: fmt.Sprint("executor-", i), MaxInFlight: 2000, Concurrency: 64, Backoff: o.backoff,
			LeaseMargin: o.margin, PayeeRate: o.payeeRate, PayeeBurst: 1, CompleteWait: o.completeWait, StreamLinger: time.Millisecond},
			exDB, &gateway.Charger{Gateway: gw, ChargeTimeout: o.chargeTO, ProbeTimeout: o.probeTO,
				ActionTimeout: o.bounds.Action, ProcessingTimeout: o.bounds.Processing, MaxRequest: o.maxRequest},
			prometheus.NewRegistry(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		var srv internalv1.ExecutorServiceServer = ex
		if o.wrapExec != nil {
			srv = o.wrapExec(i, ex)
		}
		addr, _ := serve(t, func(gs *grpc.Server) { internalv1.RegisterExecutorServiceServer(gs, srv) })
		c.execs = append(c.execs, addr)
	}
	for i := range max(o.sweepers, 1) {
		if o.noSweeper {
			break
		}
		c.startSweeper(fmt.Sprint("sweeper-", i))
	}
	if !o.noReaper {
		r, err := reaper.New(reaper.Config{Interval: 100 * time.Millisecond,
			Horizon: 30 * 24 * time.Hour, KeyTTL: time.Hour, Batch: 500}, c.db, prometheus.NewRegistry(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel = append(c.cancel, cancel)
		c.wg.Add(1)
		go func() { defer c.wg.Done(); _ = r.Run(ctx) }()
	}
	t.Cleanup(c.stop)
	return c
}

// charger is a gateway client of the cluster's simulator.
func (c *cluster) charger() *gateway.Charger {
	return &gateway.Charger{Gateway: gateway.FromClient(gatewayv1.NewGatewayServiceClient(dial(c.t, c.simAddr))), ChargeTimeout: c.o.chargeTO, ProbeTimeout: c.o.probeTO,
		MaxRequest: c.o.maxRequest}
}

// startSweeper runs one more sweeper; the returned func stops it (SIGTERM).
func (c *cluster) startSweeper(id string) context.CancelFunc {
	sw, err := sweeper.New(sweeper.Config{ID: id, Interval: c.o.interval, Cooldown: c.o.cooldown, Batch: c.o.batch, Lease: c.o.lease,
		Executors: c.execs, Slots: 2, Grace: 10 * time.Second,
		Bucket:  pacing.Bucket{Name: "gateway", Rate: c.o.ceiling, Burst: max(1, c.o.ceiling/10)},
		Breaker: &sweeper.Breaker{Threshold: 0.5, MinSamples: 50, Cooldown: 300 * time.Millisecond, MaxCooldown: 2 * time.Second, ProbeSize: 10},
	}, c.db, prometheus.NewRegistry(), quiet)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = append(c.cancel, cancel)
	done := make(chan struct{})
	c.wg.Add(1)
	go func() { defer c.wg.Done(); defer close(done); _ = sw.Run(ctx) }()
	return func() { cancel(); <-done }
}

func (c *cluster) stop() {
	for _, cancel := range c.cancel {
		cancel()
	}
	c.wg.Wait()
}

// schedule creates n payments due at `due` for payee (index appended when n > 1).
func (c *cluster) schedule(n int, payee string, due time.Time) []uuid.UUID {
	c.t.Helper()
	st := store.NewStore(c.db)
	var ids []uuid.UUID
	for start := 0; start < n; start += 1000 {
		var items []store.NewPayment
		for i := start; i < min(n, start+1000); i++ {
			id, _ := uuid.NewV7()
			p := payee
			if n > 1 {
				p = fmt.Sprint(payee, i)
			}
			items = append(items, store.NewPayment{ID: id, Payer: "alice", Payee: p, Amount: int64(100 + i),
				Currency: "USD", DueAt: due, CreatedAt: time.Now(), IdempotencyKey: id.String(),
				RequestHash: []byte{1}, Response: []byte{1}})
			ids = append(ids, id)
		}
		if _, err := st.Create(context.Background(), items); err != nil {
			c.t.Fatal(err)
		}
	}
	return ids
}

func (c *cluster) status(id uuid.UUID) (string, string) {
	var st string
	var reason *string
	if err := c.db.QueryRow(context.Background(), `SELECT status, dead_letter_reason FROM payments WHERE id = $1`, id).Scan(&st, &reason); err != nil {
		c.t.Fatal(err)
	}
	if reason == nil {
		return st, ""
	}
	return st, *reason
}

// waitTerminal waits until no payment is PENDING or PROCESSING.
func (c *cluster) waitTerminal(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var open int
		if err := c.db.QueryRow(context.Background(),
			`SELECT count(*) FROM payments WHERE status IN ('PENDING', 'PROCESSING')`).Scan(&open); err != nil {
			c.t.Fatal(err)
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d payments still open after %s:\n%s", open, timeout, c.openRows())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openRows describes the open payments, for a failing wait.
func (c *cluster) openRows() string {
	rows, err := c.db.Query(context.Background(), `SELECT id::text, status, attempt, coalesce(lease_until::text, ''),
		probe_first, run_at::text FROM payments WHERE status IN ('PENDING', 'PROCESSING') LIMIT 20`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, st, lease, runAt string
		var attempt int
		var pf bool
		if err := rows.Scan(&id, &st, &attempt, &lease, &pf, &runAt); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  %s %s attempt %d lease_until %q probe_first %v run_at %s\n", id, st, attempt, lease, pf, runAt)
	}
	return b.String()
}

func (c *cluster) report() *gatewayv1.ReportResponse {
	c.t.Helper()
	r, err := c.admin.Report(context.Background(), &gatewayv1.ReportRequest{})
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *cluster) setFaults(f *gatewayv1.Faults) {
	c.t.Helper()
	if _, err := c.admin.SetFaults(context.Background(), &gatewayv1.SetFaultsRequest{Faults: f}); err != nil {
		c.t.Fatal(err)
	}
}

type attempt struct {
	n       int32
	outcome string
	key     string
	err     string
}

func (c *cluster) attempts(id uuid.UUID) []attempt {
	c.t.Helper()
	rows, err := c.db.Query(context.Background(),
		`SELECT attempt, COALESCE(outcome, ''), gateway_key, COALESCE(error, '') FROM payment_attempts WHERE payment_id = $1 ORDER BY attempt`, id)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var out []attempt
	for rows.Next() {
		var a attempt
		if err := rows.Scan(&a.n, &a.outcome, &a.key, &a.err); err != nil {
			c.t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}
