// Package demo is `make demo`'s driver: it schedules a few thousand
// payments due within seconds against the running local stack, with
// gateway faults, shows them execute live and checks the books at the end.
package demo

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/cli"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/tools/internal/pgtally"
)

// Options configure a demo run.
type Options struct {
	// API is payments-api's gRPC address, AdminAPI admin-api's; Secret,
	// Issuer and Audience mint the demo actor's local token.
	API, AdminAPI, Secret, Issuer, Audience string
	// N payments fall due over Within; the run gives up after Timeout
	// (0: Deadline's bound).
	N               int
	Within, Timeout time.Duration
	// MaxRequest and Backoff are the stack's --gateway-max-request and
	// executor --backoff: the money rules' waits, from which the deadline
	// follows.
	MaxRequest time.Duration
	Backoff    payment.Backoff
	// Gateway is gateway-sim's address, DatabaseURL the stack's database
	// (read for the live view), Brokers the Kafka brokers.
	Gateway, DatabaseURL, Brokers string
	// AuditDatabaseURL is the audit log's database (empty: DatabaseURL).
	AuditDatabaseURL string
	// ConsoleURL is the operator console's address, printed to watch the
	// run there ("" prints nothing).
	ConsoleURL string
	// GatewayCAFile and GatewayTokenFile: gateway-sim's TLS CA and bearer
	// token; GatewayCertFile and GatewayKeyFile the demo's own client
	// certificate (the local stack's, in .data/tls).
	GatewayCAFile, GatewayTokenFile, GatewayCertFile, GatewayKeyFile string
	// Unavailable and Lost are the injected fault rates: UNAVAILABLE
	// answers, and charges whose answer is lost.
	Unavailable, Lost float64
	Out               io.Writer
}

// demoRun is one demo's handles.
type demoRun struct {
	o     *Options
	actor string
	db    *pgxpool.Pool
	// auditDB holds the audit log (db when they share a database).
	auditDB *pgxpool.Pool
	api     payschedv1.PaymentsServiceClient
	// conn is payments-api's connection (the tenant's webhook endpoint).
	conn  *grpc.ClientConn
	admin payschedv1.AdminServiceClient
	gw    gatewayv1.GatewayServiceClient
	gwAdm gatewayv1.GatewayAdminServiceClient
	ctx   context.Context
	// adminCtx carries the admin token (the reconciliation run).
	adminCtx context.Context
	from     time.Time // first due time
	to       time.Time // last due time
}

// Run schedules a realistic mix against the running stack, shows it
// execute live, and checks the money invariants at the end: an error when
// one fails.
func Run(o Options) error {
	d := &demoRun{o: &o, actor: "demo-" + time.Now().UTC().Format("150405")}
	// The run is a tenant of its own: its webhook endpoint receives this
	// run's notifications and no other's.
	tok, err := auth.MintFor([]byte(o.Secret), o.Issuer, o.Audience, d.actor, d.actor, false, 30*time.Minute)
	if err != nil {
		return err
	}
	// The reconciliation run at the end is an admin call: admin tokens
	// have their own audience.
	admTok, err := auth.Mint([]byte(o.Secret), o.Issuer, auth.DefaultAdminAudience, "demo-ops", true, 30*time.Minute)
	if err != nil {
		return err
	}
	d.adminCtx = metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+admTok)
	cc, err := grpc.NewClient(o.API, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer cc.Close()
	ac, err := grpc.NewClient(o.AdminAPI, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer ac.Close()
	gwf := &dial.Flags{Kind: dial.KindGRPC, Addr: o.Gateway, CAFile: o.GatewayCAFile, TokenFile: o.GatewayTokenFile,
		CertFile: o.GatewayCertFile, KeyFile: o.GatewayKeyFile}
	if err := gwf.Validate(); err != nil {
		return err
	}
	gc, err := gwf.DialGRPC()
	if err != nil {
		return err
	}
	defer gc.Close()
	d.api, d.admin = payschedv1.NewPaymentsServiceClient(cc), payschedv1.NewAdminServiceClient(ac)
	d.conn = cc
	d.gw, d.gwAdm = gatewayv1.NewGatewayServiceClient(gc), gatewayv1.NewGatewayAdminServiceClient(gc)
	d.ctx = metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	// The live view's statements name a due range by parameter: on a
	// custom plan each was planned over every daily partition, every
	// second (~200 ms of a core each, four of them: the demo took the
	// cores from the payments it watched). A generic plan is made once a
	// connection and prunes the partitions when it starts.
	pcfg, err := pgxpool.ParseConfig(o.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	pcfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	pcfg.MaxConns = 2
	if d.db, err = pgxpool.NewWithConfig(context.Background(), pcfg); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer d.db.Close()
	d.auditDB = d.db
	if o.AuditDatabaseURL != "" && o.AuditDatabaseURL != o.DatabaseURL {
		if d.auditDB, err = pgxpool.New(context.Background(), o.AuditDatabaseURL); err != nil {
			return fmt.Errorf("audit database: %w", err)
		}
		defer d.auditDB.Close()
	}

	// Faults for the run; the previous configuration comes back at the end.
	prev, err := d.gwAdm.GetFaults(d.ctx, &gatewayv1.GetFaultsRequest{})
	if err != nil {
		return fmt.Errorf("gateway-sim at %s: %w (is the stack up? make up)", o.Gateway, cli.RPCError(err))
	}
	if _, err := d.gwAdm.SetFaults(d.ctx, &gatewayv1.SetFaultsRequest{Faults: &gatewayv1.Faults{
		LatencyMinMs: 5, LatencyMaxMs: 30, UnavailableRate: o.Unavailable, TimeoutAfterCommitRate: o.Lost}}); err != nil {
		return fmt.Errorf("set faults: %w", cli.RPCError(err))
	}
	defer func() {
		_, _ = d.gwAdm.SetFaults(context.WithoutCancel(d.ctx), &gatewayv1.SetFaultsRequest{Faults: prev.GetFaults()})
	}()
	fmt.Fprintf(o.Out, "gateway faults: %.0f%% unavailable, %.0f%% timeout after commit, 5-30 ms latency; payees \"decline-*\" are declined\n",
		100*o.Unavailable, 100*o.Lost)

	if o.ConsoleURL != "" {
		fmt.Fprintf(o.Out, "console: %s (development login: any name, role admin); its overview shows this run live\n", o.ConsoleURL)
	}
	notes := d.watchNotifications()
	defer notes.stop()
	hooks := d.receiveWebhooks()
	defer hooks.stop()
	ids, err := d.schedule()
	if err != nil {
		return err
	}
	if err := d.schedules(); err != nil {
		return err
	}
	if d.o.Timeout == 0 {
		var why string
		d.o.Timeout, why = Deadline(d.o.Within, d.o.MaxRequest, d.o.Backoff)
		fmt.Fprintf(o.Out, "deadline %s: %s\n\n", d.o.Timeout, why)
	}
	if err := d.watch(ids); err != nil {
		return err
	}
	return d.summary(ids, notes, hooks)
}

func (d *demoRun) schedule() ([]string, error) {
	d.from = time.Now().Add(startLead)
	d.to = d.from.Add(d.o.Within)
	n := d.o.N
	var items []*payschedv1.CreateScheduledPaymentRequest
	for i := range n {
		payee := fmt.Sprintf("merchant-%03d", i%50)
		if i%25 == 7 {
			payee = "decline-" + payee // declined by rule: FAILED
		}
		due := d.from.Add(time.Duration(i) * d.o.Within / time.Duration(max(n, 1)))
		items = append(items, &payschedv1.CreateScheduledPaymentRequest{Payee: payee, Amount: int64(500 + 37*i),
			Currency: "USD", DueAt: timestamppb.New(due), RequestId: uuid.NewString(), Description: "paysched demo"})
	}
	var ids []string
	for i := 0; i < len(items); i += 1000 {
		resp, err := d.api.BatchCreateScheduledPayments(d.ctx, &payschedv1.BatchCreateScheduledPaymentsRequest{Items: items[i:min(len(items), i+1000)]})
		if err != nil {
			return nil, fmt.Errorf("schedule: %w", cli.RPCError(err))
		}
		for _, r := range resp.GetResults() {
			if r.GetOutcome() == payschedv1.BatchCreateResult_OUTCOME_REJECTED {
				return nil, fmt.Errorf("item %d rejected: %s %s", r.GetIndex(), r.GetReason(), r.GetMessage())
			}
			ids = append(ids, r.GetPayment().GetPaymentId())
		}
	}
	fmt.Fprintf(d.o.Out, "scheduled %d payments for actor %s, due from %s over %s\n", n, d.actor,
		d.from.UTC().Format("15:04:05"), d.o.Within)
	return ids, nil
}

// startLead is how far ahead of now the first payment falls due.
const startLead = 3 * time.Second

// Deadline is how long the demo waits for every payment to settle, and
// why: the last falls due Within after the first (startLead from now),
// and each may then meet the gateway's faults on every attempt its retry
// budget allows. An attempt whose answer was lost (UNAVAILABLE, or a
// timeout) is asked about first; a proven absence counts only once the
// gateway's longest request has passed since the attempt (money rule 10),
// and then the backoff runs. So an unlucky payment takes at most the
// backoff's sum plus one longest request per attempt, plus the time to
// run its attempts (slack).
func Deadline(within, maxRequest time.Duration, backoff payment.Backoff) (time.Duration, string) {
	var sum time.Duration
	for _, d := range backoff {
		sum += d + d/5 // the backoff's jitter is ±20%
	}
	attempts := len(backoff) + 1
	const slack = 20 * time.Second
	total := startLead + within + sum + time.Duration(attempts)*maxRequest + slack
	return total.Round(time.Second), fmt.Sprintf("due over %s, then up to %d attempts each: a backoff of %s (up to %s with jitter) and, per attempt, the gateway's longest request (%s) before a lost answer counts as not charged, plus %s",
		within, attempts, backoff, sum.Round(time.Second), maxRequest, slack)
}

// The live view's queries: this run's payments only (its payer, its due range).
const (
	demoStatusSQL = `SELECT status, count(*) FROM payments WHERE payer = $1 AND due_time BETWEEN $2 AND $3 GROUP BY status`
	demoOldestSQL = `SELECT coalesce(extract(epoch FROM now() - min(due_time)), 0) FROM payments
		WHERE payer = $1 AND due_time BETWEEN $2 AND $3 AND status = $4 AND run_at <= now()`
	// Lateness: first attempt's start minus the due time.
	demoLateSQL = `SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY l), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY l), 0),
		coalesce(max(l), 0), count(*)
		FROM (SELECT extract(epoch FROM a.started_at - p.due_time) AS l FROM payments p
		      JOIN payment_attempts a ON a.payment_id = p.id AND a.attempt = (SELECT min(attempt) FROM payment_attempts WHERE payment_id = p.id)
		      WHERE p.payer = $1 AND p.due_time BETWEEN $2 AND $3) x`
	demoOutcomesSQL = `SELECT coalesce(a.outcome, 'IN_FLIGHT'), count(*) FROM payments p JOIN payment_attempts a ON a.payment_id = p.id
		WHERE p.payer = $1 AND p.due_time BETWEEN $2 AND $3 GROUP BY 1`
)

// outcomeNames are the attempt outcomes the live view counts.
var outcomeNames = []string{string(payment.Succeeded), string(payment.Declined), string(payment.Retryable),
	string(payment.Ambiguous), string(payment.Abandoned)}

type lateness struct {
	p50, p99, max float64
	n             int64
}

// counts runs one of the live view's (key, count) queries over the run's
// payments: the actor's, due between from and to.
func (d *demoRun) counts(sql string) (map[string]int64, error) {
	return pgtally.ByKey(d.ctx, d.db, sql, d.actor, d.from, d.to)
}

func (d *demoRun) lateness() (lateness, error) {
	var l lateness
	err := d.db.QueryRow(d.ctx, demoLateSQL, d.actor, d.from, d.to).Scan(&l.p50, &l.p99, &l.max, &l.n)
	return l, err
}

func mix(m map[string]int64, keys ...string) string {
	var parts []string
	for _, k := range keys {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", strings.ToLower(k), m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// watch prints the live view every second until every payment is settled.
func (d *demoRun) watch(ids []string) error {
	start := time.Now()
	deadline := start.Add(d.o.Timeout)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		st, err := d.counts(demoStatusSQL)
		if err != nil {
			return fmt.Errorf("live view: %w", err)
		}
		out, err := d.counts(demoOutcomesSQL)
		if err != nil {
			return fmt.Errorf("live view: %w", err)
		}
		var oldest float64
		if err := d.db.QueryRow(d.ctx, demoOldestSQL, d.actor, d.from, d.to, string(payment.Pending)).Scan(&oldest); err != nil {
			return fmt.Errorf("live view: %w", err)
		}
		l, err := d.lateness()
		if err != nil {
			return fmt.Errorf("live view: %w", err)
		}
		fmt.Fprintf(d.o.Out, "t=%3.0fs  %-70s | oldest due %4.1fs | lateness p50 %.2fs p99 %.2fs | gateway: %s\n",
			time.Since(start).Seconds(),
			mix(st, payment.Names(payment.Statuses...)...),
			oldest, l.p50, l.p99, mix(out, append(outcomeNames, "IN_FLIGHT")...))
		if open := st[string(payment.Pending)] + st[string(payment.Processing)]; open == 0 && len(st) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d payments still open after %s: is the engine running (make up)?", st[string(payment.Pending)]+st[string(payment.Processing)], d.o.Timeout)
		}
		<-t.C
	}
}

// notifications counts this run's CloudEvents by ce_id while the demo runs.
type notifications struct {
	mu     sync.Mutex
	ids    map[string]bool // distinct ce_id
	total  int
	cancel context.CancelFunc
	done   chan struct{}
	cl     *kgo.Client
	err    error
}

func (n *notifications) stop() {
	n.cancel()
	<-n.done
	if n.cl != nil {
		n.cl.Close()
	}
}

func (n *notifications) count() (distinct, total int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.ids), n.total
}

func (d *demoRun) watchNotifications() *notifications {
	ctx, cancel := context.WithCancel(context.Background())
	n := &notifications{ids: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(d.o.Brokers, ",")...),
		kgo.ConsumeTopics(kafka.DefaultTopics.Notifications), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		n.err = err
		close(n.done)
		return n
	}
	n.cl = cl
	go func() {
		defer close(n.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				id := string(notification.Header(r, notification.HeaderID))
				if !strings.Contains(string(r.Value), `"payer":"`+d.actor+`"`) {
					return
				}
				n.mu.Lock()
				n.ids[id] = true
				n.total++
				n.mu.Unlock()
			})
		}
	}()
	return n
}

func (d *demoRun) summary(ids []string, notes *notifications, hooks *hooks) error {
	out := d.o.Out
	st, err := d.counts(demoStatusSQL)
	if err != nil {
		return err
	}
	l, err := d.lateness()
	if err != nil {
		return err
	}
	// The books: ask the gateway about every payment of the run. A COMPLETED
	// payment must have exactly its settled charge, anything else none.
	charged, mismatched := d.checkCharges(ids)
	rep, err := d.gwAdm.Report(d.ctx, &gatewayv1.ReportRequest{})
	if err != nil {
		return fmt.Errorf("gateway report: %w", cli.RPCError(err))
	}
	// The audit log and the notifications trail the engine by the CDC lag:
	// wait (bounded) until every payment's terminal status is audited and
	// every creation and terminal transition notified.
	var audited, auditedTerminal int64
	want := 2 * len(ids)
	wait := time.Now().Add(30 * time.Second)
	for {
		if err := d.auditDB.QueryRow(d.ctx, `SELECT count(*), count(DISTINCT payment_id) FILTER (WHERE table_name = 'payments' AND status = ANY($2))
			FROM audit_events WHERE payment_id = ANY($1::uuid[])`, ids,
			payment.Names(payment.Completed, payment.Failed, payment.Cancelled, payment.DeadLettered)).Scan(&audited, &auditedTerminal); err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		distinct, _ := notes.count()
		verified, _, _ := hooks.count()
		if (auditedTerminal >= int64(len(ids)) && distinct >= want && (hooks.err != nil || verified >= want)) || time.Now().After(wait) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	distinct, total := notes.count()

	fmt.Fprintf(out, "\n== summary (%d payments) ==\n", len(ids))
	keys := make([]string, 0, len(st))
	for k := range st {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "  %-14s %d\n", k, st[k])
	}
	fmt.Fprintf(out, "  lateness       p50 %.2fs  p99 %.2fs  max %.2fs (first attempt start - due time, %d payments)\n", l.p50, l.p99, l.max, l.n)
	fmt.Fprintf(out, "  gateway        %d charges for this run's payments, %d COMPLETED payments, %d mismatched\n", charged, st[string(payment.Completed)], mismatched)
	fmt.Fprintf(out, "  double charges %d (gateway-wide)\n", len(rep.GetDoubleCharged()))
	fmt.Fprintf(out, "  audit events   %d rows (%d of %d payments' terminal status audited)\n", audited, auditedTerminal, len(ids))
	if notes.err != nil {
		fmt.Fprintf(out, "  notifications  unavailable: %v\n", notes.err)
	} else {
		fmt.Fprintf(out, "  notifications  %d distinct ce_id (%d delivered; expected %d: creation + terminal per payment)\n", distinct, total, want)
	}
	verified, received, refused := hooks.count()
	if hooks.err != nil {
		fmt.Fprintf(out, "  webhooks       unavailable: %v\n", hooks.err)
	} else {
		fmt.Fprintf(out, "  webhooks       %d signed deliveries verified (distinct webhook-id; %d received, %d refused; expected %d)\n",
			verified, received, len(refused), want)
	}
	recon := d.reconcile(out)

	var bad []string
	if completed := st[string(payment.Completed)]; charged != int(completed) || mismatched > 0 {
		bad = append(bad, fmt.Sprintf("gateway charges %d != COMPLETED %d (mismatched %d)", charged, completed, mismatched))
	}
	if len(rep.GetDoubleCharged()) > 0 {
		bad = append(bad, fmt.Sprintf("double charged: %v", rep.GetDoubleCharged()))
	}
	if recon != nil {
		bad = append(bad, recon.Error())
	}

	if len(bad) > 0 {
		return fmt.Errorf("money invariant violated: %s", strings.Join(bad, "; "))
	}
	fmt.Fprintln(out, "\nmoney invariants hold: gateway charges == COMPLETED payments, no double charge")
	if len(refused) > 0 {
		return fmt.Errorf("webhook signatures refused: %v", refused[:min(3, len(refused))])
	}
	return nil
}

// checkCharges asks the gateway about each payment, 16 at a time.
func (d *demoRun) checkCharges(ids []string) (charged, mismatched int) {
	type result struct{ succeeded, bad bool }
	res := make([]result, len(ids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			p, err := d.api.GetScheduledPayment(d.ctx, &payschedv1.GetScheduledPaymentRequest{PaymentId: id})
			if err != nil {
				res[i].bad = true
				return
			}
			got, err := d.gw.GetCharge(d.ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: id})
			ok := err == nil && got.GetCharge().GetStatus() == gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED
			completed := p.GetPayment().GetStatus() == payschedv1.PaymentStatus_COMPLETED
			res[i] = result{ok, ok != completed || (ok && got.GetCharge().GetAmount() != p.GetPayment().GetAmount())}
		}()
	}
	wg.Wait()
	for _, r := range res {
		if r.succeeded {
			charged++
		}
		if r.bad {
			mismatched++
		}
	}
	return charged, mismatched
}

// reconcile runs today's reconciliation and prints it; an error means it
// found something wrong (or could not run).
func (d *demoRun) reconcile(out io.Writer) error {
	ctx, cancel := context.WithTimeout(d.adminCtx, 2*time.Minute)
	defer cancel()
	resp, err := d.admin.TriggerReconciliationRun(ctx, &payschedv1.TriggerReconciliationRunRequest{Day: time.Now().UTC().Format(time.DateOnly)})
	if err != nil {
		fmt.Fprintf(out, "  reconciliation could not run: %v\n", cli.RPCError(err))
		return nil // the books above are checked directly; the run is a bonus
	}
	r := resp.GetRun()
	fmt.Fprintf(out, "  reconciliation run %d of %s: %s, %d charges, %d COMPLETED payments, %d repaired, %d mismatches\n",
		r.GetRunId(), r.GetDay(), r.GetState(), r.GetCharges(), r.GetPayments(), r.GetRepaired(), r.GetMismatches())
	for _, it := range r.GetItems() {
		fmt.Fprintf(out, "    %s %s payment=%s %s\n", it.GetSeverity(), it.GetKind(), it.GetPaymentId(), it.GetDetail())
	}
	if r.GetState() != string(store.RunSucceeded) {
		return fmt.Errorf("reconciliation run %s: %s", r.GetState(), r.GetError())
	}
	if r.GetMismatches() > 0 {
		return fmt.Errorf("reconciliation found %d mismatches", r.GetMismatches())
	}
	return nil
}
