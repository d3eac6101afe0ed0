package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	gwdial "github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/platform/devtls"
	"github.com/paysched/paysched/pkg/platform/svc"
)

// Config bounds and places a chaos run.
type Config struct {
	Bin      string // directory holding the service binaries
	Dir      string // logs and the kafka data directory
	PGScript string // deploy/local/pg.sh
	PGDir    string // the cluster's directory for pg.sh
	PGPort   int
	// EventsPGPort is the events' cluster (the audit log and the
	// webhooks, apart from the schedule's: 0, the same cluster).
	EventsPGPort int
	Base         int // ports: Base+80.. (see ports)
	// Payments fall due evenly over Spread, starting Lead from now.
	Payments     int
	Spread, Lead time.Duration
	// A kill -9 every KillMin..KillMax.
	KillMin, KillMax time.Duration
	// Settle bounds the wait, after the chaos, for every payment to end.
	Settle time.Duration
	// Resync adds a lost replication slot to the chaos: cdc is stopped,
	// its slot dropped (a failover that did not carry it), and cdc comes
	// back with --resync, emitting snapshot events for the rows changed
	// since its last confirmed position.
	Resync bool
	Out    io.Writer
}

// Result is what the last line reports.
type Result struct {
	Payments, Kills, DoubleCharged, Stuck, LostEvents, Violations int
	// Webhooks is the line before the last.
	Webhooks WebhookResult
}

func (r Result) String() string {
	return fmt.Sprintf("chaos payments=%d kills=%d double_charged=%d stuck=%d lost_events=%d violations=%d",
		r.Payments, r.Kills, r.DoubleCharged, r.Stuck, r.LostEvents, r.Violations)
}

const webhookSecret = "chaos-webhook-secret"

// A charge whose caller gave up is made lateRecord after its request
// (gateway-sim's --late-record); the services take maxRequest as the
// gateway's longest request (--gateway-max-request), which must not be
// shorter.
const (
	lateRecord = 3 * time.Second
	maxRequest = 5 * time.Second
)

// startup is the time allowed for the stack to come up before the lead.
const startup = 15 * time.Second

// The payee outage: gateway-sim refuses, uncharged, every charge for a
// payee with this prefix for the run's first outageFor.
const (
	outagePayee = "outage-"
	outageFor   = 40 * time.Second
)

type run struct {
	cfg   Config
	t0    time.Time // the first due time
	procs []*proc
	db    *pgxpool.Pool
	// auditDB is the audit log's database (paysched_audit), hooksDB the
	// webhooks' (paysched_webhooks).
	auditDB *pgxpool.Pool
	hooksDB *pgxpool.Pool
	gwDB    *pgxpool.Pool
	api     payschedv1.PaymentsServiceClient
	// schedules is payments-api's SchedulesService; plans the run's
	// schedules (schedules.go).
	schedules payschedv1.SchedulesServiceClient
	plans     []plan
	admin     payschedv1.AdminServiceClient
	gwAdm     gatewayv1.GatewayAdminServiceClient
	conns     []*grpc.ClientConn
	tls       devtls.Files // gateway-sim's certificate and token

	mu     sync.Mutex
	events []string       // what the driver did, in order
	kills  map[string]int // kill -9 per process
	// killsHolding counts the executors killed while their completer held
	// outcomes (--complete-wait).
	killsHolding int
	findings     []string
	res          Result
	// hooks are the webhook receivers; notified is every notification
	// read back from Kafka (ce_id -> payment id).
	hooks    []*receiver
	notified map[string]string
	// resynced: the run lost cdc's slot and resynced (Config.Resync): the
	// changes in the gap reach Kafka as the rows' snapshots, not one by
	// one, and the stream's checks take a snapshot event as the row's
	// state at that point.
	resynced bool
}

// portSpan covers every offset from Base the run binds (80 to the second
// receiver's 441).
const portSpan = 450

// freePorts moves Base on by a thousand while any port of the run's span is
// taken: a process left over from an earlier run (or anything else on the
// machine) would otherwise make one service crash-loop on bind and fail
// the run for a reason that is not the engine's.
func (r *run) freePorts() error {
	for try := 0; try < 8; try++ {
		busy := busyPort(r.cfg.Base+80, r.cfg.Base+portSpan)
		if busy == 0 {
			return nil
		}
		r.logf("port %d is taken: moving the run's ports from base %d to %d", busy, r.cfg.Base, r.cfg.Base+1000)
		r.cfg.Base += 1000
	}
	return fmt.Errorf("no free block of %d ports found below %d", portSpan, r.cfg.Base)
}

// busyPort is the first port in [from, to) on 127.0.0.1 that cannot be
// bound, or 0.
func busyPort(from, to int) int {
	for p := from; p < to; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return p
		}
		l.Close()
	}
	return 0
}

func (r *run) addr(off int) string { return fmt.Sprintf("127.0.0.1:%d", r.cfg.Base+off) }

func (r *run) dbURL(name string) string {
	port := r.cfg.PGPort
	if (name == "paysched_audit" || name == "paysched_webhooks") && r.cfg.EventsPGPort != 0 {
		port = r.cfg.EventsPGPort
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, name)
}

// cdcURL is the cluster's Unix socket when there is one, as in the local
// stack (pg.sh socket-url; see pkg/events/cdc's pacedConn), so the chaos kills and
// restarts cdc and Postgres on that path.
func (r *run) cdcURL() string {
	out, err := exec.Command(r.cfg.PGScript, "socket-url", r.cfg.PGDir, fmt.Sprint(r.cfg.PGPort), "paysched").Output()
	if err != nil {
		return r.dbURL("paysched")
	}
	return strings.TrimSpace(string(out))
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Out, "chaos: "+format+"\n", args...)
}

// violation records a failed invariant.
func (r *run) violation(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Violations++
	r.findings = append(r.findings, "VIOLATION: "+fmt.Sprintf(format, args...))
}

// The bounds after which an undecided charge is cancelled at the gateway:
// short, so that the run sees both the cancels (authentication never
// comes) and processing charges that succeed before their bound.
const (
	actionBound     = "10s"
	processingBound = "1m"
)

// topology is the full local stack: 2 sweepers, 3 executors, the reaper,
// cdc, the audit-consumer, the webhook-dispatcher, the reconciler, and
// gateway-sim with its Postgres ledger and the issue's faults.
func (r *run) topology() {
	b := func(n string) string { return filepath.Join(r.cfg.Bin, n) }
	tlsPath := func(n string) string { return filepath.Join(filepath.Dir(r.tls.CAFile), n) }
	// Development mode: the run's database and Kafka are local and
	// plaintext; the gRPC hops are still mutual TLS, as production's.
	env := []string{"PAYSCHED_DATABASE_URL=" + r.dbURL("paysched"), "PAYSCHED_DEV=1"}
	// The audit log in its own database, as production has it.
	auditEnv := append([]string{"PAYSCHED_AUDIT_DATABASE_URL=" + r.dbURL("paysched_audit")}, env...)
	// The webhooks in theirs.
	hooksEnv := append([]string{"PAYSCHED_WEBHOOKS_DATABASE_URL=" + r.dbURL("paysched_webhooks")}, env...)
	// Every caller of gateway-sim presents its own certificate, and knows
	// its longest request: a charge its caller left is made up to
	// lateRecord later (gateway-sim's --late-record), so an absence counts
	// only past that.
	gw := func(client string) []string {
		return []string{"--gateway-addr", r.addr(300), "--gateway-ca-file", r.tls.CAFile, "--gateway-token-file", r.tls.TokenFile,
			"--gateway-cert-file", tlsPath(client + ".pem"), "--gateway-key-file", tlsPath(client + "-key.pem"),
			"--gateway-max-request", maxRequest.String()}
	}
	d := r.cfg.Dir
	kafka := r.addr(92)
	execs := []string{r.addr(100), r.addr(110), r.addr(120)}
	r.procs = []*proc{
		newProc(d, "kafka", "kafka", b("kafka"), env, "--kafka-port", fmt.Sprint(r.cfg.Base+92),
			"--kafka-data-dir", filepath.Join(d, "kafka"), "--http-addr", r.addr(93)),
		newProc(d, "payments-api", "payments-api", b("payments-api"), hooksEnv, "--http-addr", r.addr(80), "--grpc-addr", r.addr(90),
			"--metrics-addr", r.addr(190)),
		newProc(d, "admin-api", "admin-api", b("admin-api"), hooksEnv, append([]string{"--http-addr", r.addr(81), "--grpc-addr", r.addr(91),
			"--metrics-addr", r.addr(191)},
			gw("admin-api")...)...),
		newProc(d, "gateway-sim", "gateway-sim", b("gateway-sim"), env, "--grpc-addr", r.addr(300), "--http-addr", r.addr(301),
			"--gateway-database-url", r.dbURL("paysched_gateway"), "--latency-min-ms", "5", "--latency-max-ms", "50",
			"--unavailable-rate", "0.05", "--timeout-after-commit-rate", "0.02", "--decline-rate", "0.01",
			// Harsher than a polite simulator: answers lost to a dropped
			// connection after the charge, and keys forgotten after 30 s
			// (a real PSP forgets them too), so any re-charge that does not
			// ask first shows up as a double charge.
			"--unavailable-after-commit-rate", "0.02", "--key-retention", "30s",
			// A PSP finishes what its caller left: a charge whose executor
			// timed out or was killed is made anyway, seconds later.
			// One charge in a hundred outlasts the executors' 2 s.
			"--late-record", lateRecord.String(), "--slow-rate", "0.01", "--slow-time", "2500ms",
			// Stripe's semantics: a lookup by key that lags new charges (as
			// Search does) and sometimes cannot prove an absence or fails;
			// a NUL and terminal escapes in some answers' strings; charges
			// that wait for the customer's authentication until cancelled,
			// and charges that stay processing a while.
			"--probe-lag", "3s", "--probe-unproven-rate", "0.05", "--probe-unavailable-rate", "0.03", "--poison-rate", "0.05",
			"--action-required-rate", "0.005", "--processing-rate", "0.01", "--processing-time", "5s",
			// One merchant's bank down for the run's first 40 s: longer than
			// the executors' budget (1+2+4+8+16 s), so its payments due
			// first are dead-lettered, and re-driven once it is back.
			"--payee-outage-prefix", outagePayee, "--payee-outage-until", r.t0.Add(outageFor).Format(time.RFC3339Nano),
			"--webhook-url", "http://"+r.addr(420)+"/webhooks/gateway", "--webhook-secret", webhookSecret,
			// Mutual TLS and a bearer token, as a PSP adapter would have.
			"--tls-cert-file", r.tls.CertFile, "--tls-key-file", r.tls.KeyFile, "--tls-client-ca-file", r.tls.CAFile,
			"--token-file", r.tls.TokenFile),
		newProc(d, "reaper", "reaper", b("reaper"), env, "--http-addr", r.addr(210), "--interval", "1s"),
		newProc(d, "cdc", "cdc", b("cdc"), env, "--database-url", r.cdcURL(), "--http-addr", r.addr(400), "--kafka-brokers", kafka,
			"--status-interval", "500ms", "--heartbeat-interval", "2s"),
		newProc(d, "audit-consumer", "audit-consumer", b("audit-consumer"), auditEnv, "--http-addr", r.addr(410), "--kafka-brokers", kafka),
		// The run's receivers are on loopback (development mode), and its
		// retries are seconds apart (hookSchedule).
		newProc(d, "webhook-dispatcher", "webhook-dispatcher", b("webhook-dispatcher"), hooksEnv, "--http-addr", r.addr(dispatcherPort),
			"--kafka-brokers", kafka, "--allow-loopback", "--retry-schedule", hookSchedule, "--timeout", "5s"),
		newProc(d, "reconciler", "reconciler", b("reconciler"), env, append([]string{"--http-addr", r.addr(420), "--metrics-addr", r.addr(421),
			"--webhook-secret", webhookSecret, "--probe-interval", "1s", "--probe-backoff", "1s",
			"--action-required-timeout", actionBound, "--processing-timeout", processingBound}, gw("reconciler")...)...),
	}
	for i, a := range execs {
		r.procs = append(r.procs, newProc(d, fmt.Sprint("executor-", i+1), "executor", b("executor"), env, append([]string{
			"--grpc-addr", a, "--http-addr", r.addr(101 + 10*i),
			"--backoff", "1s,2s,4s,8s,16s", "--charge-timeout", "2s", "--probe-timeout", "1s",
			"--action-required-timeout", actionBound, "--processing-timeout", processingBound,
			"--tls-cert-file", tlsPath("executor.pem"), "--tls-key-file", tlsPath("executor-key.pem"), "--tls-client-ca-file", r.tls.CAFile},
			gw("executor")...)...))
	}
	for i := range 2 {
		r.procs = append(r.procs, newProc(d, fmt.Sprint("sweeper-", i+1), "sweeper", b("sweeper"), env,
			"--http-addr", r.addr(200+i), "--executors", strings.Join(execs, ","), "--lease", "10s", "--interval", "250ms",
			"--executor-ca-file", r.tls.CAFile, "--executor-cert-file", tlsPath("sweeper.pem"), "--executor-key-file", tlsPath("sweeper-key.pem")))
	}
}

// killPlanner kills payments-api (and so its planner) with kill -9 while
// the schedules' first occurrences fall due, once besides the random kills.
func (r *run) killPlanner() {
	if p := r.proc("payments-api"); p != nil {
		r.event("kill -9 payments-api (the planner)")
		if err := p.kill9(time.Second); err != nil {
			r.violation("restart payments-api: %v", err)
		}
	}
}

func (r *run) proc(name string) *proc {
	for _, p := range r.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// Run executes a chaos run and returns its result; err is for a run that
// could not be carried out at all (not for violations).
func Run(ctx context.Context, cfg Config) (Result, error) {
	// The first due time is fixed before anything starts (with time for the
	// stack to come up): gateway-sim's payee outage is measured from it.
	r := &run{cfg: cfg, kills: map[string]int{}, t0: time.Now().Add(startup + cfg.Lead)}
	r.res.Payments = cfg.Payments
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return r.res, err
	}
	migrate := exec.CommandContext(ctx, filepath.Join(cfg.Bin, "migrate"), "--dev", "--database-url", r.dbURL("paysched"),
		"--audit-database-url", r.dbURL("paysched_audit"), "--webhooks-database-url", r.dbURL("paysched_webhooks"))
	if out, err := migrate.CombinedOutput(); err != nil {
		return r.res, fmt.Errorf("migrate: %w: %s", err, out)
	}
	tlsFiles, err := devtls.Prepare(filepath.Join(cfg.Dir, "tls"), "gateway-sim", []string{"127.0.0.1", "localhost"})
	if err != nil {
		return r.res, fmt.Errorf("development TLS: %w", err)
	}
	r.tls = tlsFiles
	// Sweeper to executor, and every service to gateway-sim, is mutual TLS
	// from the same CA; "operator" is this run's own gateway client.
	ca, err := devtls.LoadOrCreateCA(filepath.Dir(tlsFiles.CAFile))
	if err != nil {
		return r.res, fmt.Errorf("development TLS: %w", err)
	}
	for name, hosts := range map[string][]string{"executor": {"127.0.0.1", "localhost"}, "sweeper": nil,
		"reconciler": nil, "admin-api": nil, "operator": nil} {
		if err := ca.Issue(filepath.Dir(tlsFiles.CAFile), name, hosts); err != nil {
			return r.res, fmt.Errorf("development TLS: %w", err)
		}
	}
	if err := r.freePorts(); err != nil {
		return r.res, err
	}
	r.topology()
	for _, p := range r.procs {
		if err := p.start(); err != nil {
			return r.res, err
		}
	}
	defer r.stopAll()
	if err := r.connect(ctx); err != nil {
		return r.res, err
	}
	defer r.close()
	if err := r.setupWebhooks(ctx); err != nil {
		return r.res, err
	}
	defer func() {
		for _, h := range r.hooks {
			h.down()
		}
	}()

	w := newWorkload(r)
	t0 := r.t0
	if late := time.Now().Add(cfg.Lead); late.After(t0) {
		r.logf("the stack took over %s to start: payments are due %s later than planned, the payee outage is that much shorter",
			startup, late.Sub(t0).Round(time.Second))
		t0 = late
	}
	if err := w.setLimits(ctx); err != nil {
		return r.res, err
	}
	if err := w.create(ctx, t0); err != nil {
		return r.res, err
	}
	if err := r.makePlans(ctx, t0); err != nil {
		return r.res, err
	}
	end := t0.Add(cfg.Spread).Add(5 * time.Second)
	var wg sync.WaitGroup
	wg.Add(6)
	go func() { defer wg.Done(); w.cancels(ctx) }()
	go func() { defer wg.Done(); w.reschedules(ctx, end) }()
	go func() { defer wg.Done(); w.redrives(ctx, end) }()
	go func() { defer wg.Done(); w.holds(ctx, end) }()
	go func() { defer wg.Done(); r.disrupt(ctx, t0, end) }()
	go func() { defer wg.Done(); r.webhookChaos(ctx, end) }()
	wg.Wait()
	r.logf("chaos over: %s", strings.Join(r.events, ", "))
	r.logf("executors killed while their completer held outcomes: %d of %d executor kills", r.killsHolding, r.executorKills())
	// Whatever is down comes back before the checks (a real cluster heals).
	for _, p := range r.procs {
		p.mu.Lock()
		down := p.stopped
		p.mu.Unlock()
		if down {
			_ = p.start()
		}
	}
	r.cancelPlans(ctx)
	r.check(ctx, w, t0)
	for _, p := range r.procs {
		p.mu.Lock()
		n, last := p.restarts, p.lastExit
		p.mu.Unlock()
		if n > 0 {
			r.logf("%s exited on its own %d times (last: %s); last lines of %s:\n%s", p.name, n, last, p.log, tail(p.log, 8))
		}
		if strings.Contains(tail(p.log, 400), "panic:") {
			r.violation("%s panicked; see %s:\n%s", p.name, p.log, tail(p.log, 20))
		}
	}
	for _, f := range r.findings {
		fmt.Fprintln(cfg.Out, f)
	}
	return r.res, nil
}

func (r *run) connect(ctx context.Context) error {
	var err error
	if r.db, err = pgxpool.New(ctx, r.dbURL("paysched")); err != nil {
		return err
	}
	if r.auditDB, err = pgxpool.New(ctx, r.dbURL("paysched_audit")); err != nil {
		return err
	}
	if r.hooksDB, err = pgxpool.New(ctx, r.dbURL("paysched_webhooks")); err != nil {
		return err
	}
	dial := func(a string) (*grpc.ClientConn, error) {
		// A client of a service that keeps being killed: reconnect within a
		// second (gRPC's default backoff grows to two minutes).
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)), svc.FastReconnect())
		if err == nil {
			r.conns = append(r.conns, cc)
		}
		return cc, err
	}
	apiConn, err := dial(r.addr(90))
	if err != nil {
		return err
	}
	gwf := r.operator()
	gwConn, err := gwf.DialGRPC(svc.FastReconnect())
	if err != nil {
		return err
	}
	r.conns = append(r.conns, gwConn)
	adminConn, err := dial(r.addr(91))
	if err != nil {
		return err
	}
	r.api, r.admin = payschedv1.NewPaymentsServiceClient(apiConn), payschedv1.NewAdminServiceClient(adminConn)
	r.schedules = payschedv1.NewSchedulesServiceClient(apiConn)
	r.gwAdm = gatewayv1.NewGatewayAdminServiceClient(gwConn)
	// gateway-sim creates its database on start: wait for it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err = r.gwAdm.Report(ctx, &gatewayv1.ReportRequest{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway-sim never answered: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.checkGatewayRefusesStrangers(ctx)
	r.gwDB, err = pgxpool.New(ctx, r.dbURL("paysched_gateway"))
	return err
}

// operator is this run's gateway client: mutual TLS as "operator", with
// the token.
func (r *run) operator() *gwdial.Flags {
	dir := filepath.Dir(r.tls.CAFile)
	return &gwdial.Flags{Kind: gwdial.KindGRPC, Addr: r.addr(300), CAFile: r.tls.CAFile, TokenFile: r.tls.TokenFile,
		CertFile: filepath.Join(dir, "operator.pem"), KeyFile: filepath.Join(dir, "operator-key.pem")}
}

// checkGatewayRefusesStrangers makes sure the run really is mutual TLS
// with a token: a plaintext client, a TLS client without a certificate, a
// client with a sweeper's certificate (not a gateway caller) and one
// without the token are all refused.
func (r *run) checkGatewayRefusesStrangers(ctx context.Context) {
	dir := filepath.Dir(r.tls.CAFile)
	sweeper, noToken := r.operator(), r.operator()
	sweeper.CertFile, sweeper.KeyFile = filepath.Join(dir, "sweeper.pem"), filepath.Join(dir, "sweeper-key.pem")
	noToken.TokenFile = ""
	for name, f := range map[string]*gwdial.Flags{
		"plaintext":        {Kind: gwdial.KindGRPC, Addr: r.addr(300)},
		"no certificate":   {Kind: gwdial.KindGRPC, Addr: r.addr(300), CAFile: r.tls.CAFile, TokenFile: r.tls.TokenFile},
		"sweeper identity": sweeper,
		"no token":         noToken,
	} {
		cc, err := f.DialGRPC()
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = gatewayv1.NewGatewayAdminServiceClient(cc).Report(cctx, &gatewayv1.ReportRequest{})
		cancel()
		cc.Close()
		if err == nil {
			r.violation("gateway-sim answered a %s client", name)
		}
	}
	// Only the executor charges: the reconciler's identity is refused.
	recon := r.operator()
	recon.CertFile, recon.KeyFile = filepath.Join(dir, "reconciler.pem"), filepath.Join(dir, "reconciler-key.pem")
	if cc, err := recon.DialGRPC(); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = gatewayv1.NewGatewayServiceClient(cc).Charge(cctx, &gatewayv1.ChargeRequest{IdempotencyKey: "chaos-probe", Amount: 1,
			Currency: "USD", Payer: "x", Payee: "y", Reference: "chaos-probe"})
		cancel()
		cc.Close()
		if status.Code(err) != codes.PermissionDenied {
			r.violation("gateway-sim let the reconciler's identity charge: %v", err)
		}
	}
}

func (r *run) close() {
	for _, cc := range r.conns {
		cc.Close()
	}
	if r.db != nil {
		r.db.Close()
	}
	if r.auditDB != nil {
		r.auditDB.Close()
	}
	if r.hooksDB != nil {
		r.hooksDB.Close()
	}
	if r.gwDB != nil {
		r.gwDB.Close()
	}
}

func (r *run) stopAll() {
	// Sweepers first, then the rest, like `make down`.
	order := append([]*proc{}, r.procs...)
	sort.SliceStable(order, func(i, j int) bool { return order[i].tier == "sweeper" && order[j].tier != "sweeper" })
	for _, p := range order {
		p.signal(syscall.SIGTERM, 20*time.Second)
	}
}

func (r *run) event(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...)+fmt.Sprintf(" @%s", time.Now().UTC().Format("15:04:05")))
}

// disrupt is the chaos driver: a kill -9 of a random service every
// KillMin..KillMax, and once each a Postgres restart, a Kafka restart and a
// SIGTERM of the whole executor tier, spread over the due window.
func (r *run) disrupt(ctx context.Context, t0, end time.Time) {
	span := end.Sub(t0)
	special := []struct {
		at time.Time
		do func()
	}{
		{t0.Add(span / 8), r.killPlanner},
		{t0.Add(span / 4), r.sigtermTier},
		{t0.Add(span * 2 / 5), r.restartPostgres},
		{t0.Add(span * 3 / 5), r.restartKafka},
	}
	if r.cfg.Resync {
		special = append(special, struct {
			at time.Time
			do func()
		}{t0.Add(span * 7 / 10), r.resyncCDC})
	}
	var victims []*proc
	for _, p := range r.procs {
		if p.tier != "kafka" {
			victims = append(victims, p)
		}
	}
	next := time.Now().Add(r.pause())
	for time.Now().Before(end) && ctx.Err() == nil {
		if len(special) > 0 && !time.Now().Before(special[0].at) {
			special[0].do()
			special = special[1:]
			continue
		}
		if !time.Now().Before(next) {
			p := victims[rand.IntN(len(victims))]
			how := ""
			if p.tier == "executor" {
				// An executor is killed while its completer holds outcomes
				// for its next statement, when it holds any within a second:
				// those outcomes are lost with it, their leases expire and
				// the next attempts ask the gateway first.
				if n := heldOutcomes(p, time.Second); n > 0 {
					how = fmt.Sprintf(" (holding %d outcomes)", n)
					r.mu.Lock()
					r.killsHolding++
					r.mu.Unlock()
				}
			}
			if err := p.kill9(time.Duration(200+rand.IntN(1300)) * time.Millisecond); err != nil {
				r.violation("restart %s: %v", p.name, err)
			}
			r.mu.Lock()
			r.kills[p.name]++
			r.res.Kills++
			r.mu.Unlock()
			r.event("kill -9 %s%s", p.name, how)
			next = time.Now().Add(r.pause())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range special { // a short run still gets each once
		s.do()
	}
}

// executorKills is how many kill -9 hit an executor.
func (r *run) executorKills() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for name, k := range r.kills {
		if strings.HasPrefix(name, "executor-") {
			n += k
		}
	}
	return n
}

// heldOutcomes waits up to wait for p (an executor) to hold outcomes in
// its completer (paysched_executor_outcomes_held, from its metrics) and
// returns how many it held when it did (0: it held none meanwhile, or did
// not answer).
func heldOutcomes(p *proc, wait time.Duration) int {
	addr := ""
	for i, a := range p.args {
		if a == "--http-addr" && i+1 < len(p.args) {
			addr = p.args[i+1]
		}
	}
	if addr == "" {
		return 0
	}
	cl := &http.Client{Timeout: 200 * time.Millisecond}
	for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		resp, err := cl.Get("http://" + addr + "/metrics")
		if err != nil {
			return 0
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "paysched_executor_outcomes_held "); ok {
				if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && n > 0 {
					return int(n)
				}
			}
		}
	}
	return 0
}

func (r *run) pause() time.Duration {
	return r.cfg.KillMin + time.Duration(rand.Int64N(int64(r.cfg.KillMax-r.cfg.KillMin)+1))
}

func (r *run) sigtermTier() {
	var tier []*proc
	for _, p := range r.procs {
		if p.tier == "executor" {
			tier = append(tier, p)
		}
	}
	var wg sync.WaitGroup
	for _, p := range tier {
		wg.Add(1)
		go func() { defer wg.Done(); p.signal(syscall.SIGTERM, 60*time.Second) }()
	}
	wg.Wait()
	time.Sleep(time.Second)
	for _, p := range tier {
		if err := p.start(); err != nil {
			r.violation("restart %s: %v", p.name, err)
		}
	}
	r.mu.Lock()
	r.res.Kills += len(tier)
	r.mu.Unlock()
	r.event("SIGTERM executor tier (%d)", len(tier))
}

func (r *run) restartPostgres() {
	out, err := exec.Command(r.cfg.PGScript, "restart", r.cfg.PGDir, fmt.Sprint(r.cfg.PGPort)).CombinedOutput()
	if err != nil {
		r.violation("postgres restart failed: %v: %s", err, out)
		return
	}
	r.mu.Lock()
	r.res.Kills++
	r.mu.Unlock()
	r.event("postgres restart (pg_ctl restart -m fast)")
}

func (r *run) restartKafka() {
	if err := r.proc("kafka").kill9(time.Second); err != nil {
		r.violation("restart kafka: %v", err)
	}
	r.mu.Lock()
	r.res.Kills++
	r.mu.Unlock()
	r.event("kafka restart (data kept)")
}

// resyncCDC loses cdc's replication slot, as a failover that did not
// carry it would: cdc is stopped, the slot dropped, and cdc refuses to
// stream from the new one unless started with --resync, which it now is
// for the rest of the run (a no-op while the slot continues).
func (r *run) resyncCDC() {
	p := r.proc("cdc")
	p.signal(syscall.SIGTERM, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The walsender of the stopped cdc may outlive it by a moment: an
	// active slot cannot be dropped.
	var err error
	for ctx.Err() == nil {
		var dropped int
		err = r.db.QueryRow(ctx, `SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots
			WHERE slot_name = 'paysched_cdc' AND NOT active`).Scan(&dropped)
		if err == nil && dropped == 1 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ctx.Err() != nil {
		r.violation("resync: drop cdc's slot: %v", err)
	}
	p.mu.Lock()
	p.args = append(p.args[:len(p.args):len(p.args)], "--resync")
	p.mu.Unlock()
	if err := p.start(); err != nil {
		r.violation("restart cdc with --resync: %v", err)
	}
	r.mu.Lock()
	r.res.Kills++
	r.resynced = true
	r.mu.Unlock()
	r.event("cdc's slot lost: cdc stopped, its slot dropped, restarted with --resync")
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
