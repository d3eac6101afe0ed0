package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/auth"
	"github.com/paysched/paysched/pkg/kafka"
)

type demoOpts struct {
	n                 int
	within, timeout   time.Duration
	gwAddr, dbURL     string
	brokers           string
	unavailable, lost float64
}

// demoCmd schedules a realistic mix against the running stack, shows it
// execute live, and checks the money invariants at the end.
func demoCmd(g *globals) *cobra.Command {
	o := &demoOpts{}
	c := &cobra.Command{
		Use:   "demo",
		Short: "Schedule ~2,000 payments due over 30 s with gateway faults, watch them live, check the books",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runDemo(g, o) },
	}
	f := c.Flags()
	f.IntVar(&o.n, "n", 2000, "payments to schedule")
	f.DurationVar(&o.within, "within", 30*time.Second, "spread of due times")
	f.DurationVar(&o.timeout, "timeout", 150*time.Second, "give up waiting after this")
	f.Float64Var(&o.unavailable, "unavailable-rate", 0.05, "injected: gateway answers UNAVAILABLE (retried with backoff)")
	f.Float64Var(&o.lost, "timeout-after-commit-rate", 0.03, "injected: gateway charges, then the answer is lost (settled by a probe)")
	f.StringVar(&o.gwAddr, "gateway", env("gateway-addr", "127.0.0.1:9300"), "gateway-sim address (env PAYSCHED_GATEWAY_ADDR)")
	f.StringVar(&o.dbURL, "database-url", env("database-url", "postgres://postgres@127.0.0.1:55432/paysched?sslmode=disable"),
		"the stack's database, read for the live view (env PAYSCHED_DATABASE_URL)")
	f.StringVar(&o.brokers, "kafka-brokers", env("kafka-brokers", "127.0.0.1:9092"), "Kafka brokers (env PAYSCHED_KAFKA_BROKERS)")
	return c
}

// demoRun is one demo's handles.
type demoRun struct {
	g     *globals
	o     *demoOpts
	actor string
	db    *pgxpool.Pool
	api   payschedv1.PaymentsServiceClient
	admin payschedv1.AdminServiceClient
	gw    gatewayv1.GatewayServiceClient
	gwAdm gatewayv1.GatewayAdminServiceClient
	ctx   context.Context
	from  time.Time // first due time
	to    time.Time // last due time
}

func runDemo(g *globals, o *demoOpts) error {
	d := &demoRun{g: g, o: o, actor: "demo-" + time.Now().UTC().Format("150405")}
	tok, err := auth.Mint([]byte(g.secret), g.issuer, g.audience, d.actor, true, time.Hour)
	if err != nil {
		return err
	}
	cc, err := grpc.NewClient(g.api, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer cc.Close()
	gc, err := grpc.NewClient(o.gwAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer gc.Close()
	d.api, d.admin = payschedv1.NewPaymentsServiceClient(cc), payschedv1.NewAdminServiceClient(cc)
	d.gw, d.gwAdm = gatewayv1.NewGatewayServiceClient(gc), gatewayv1.NewGatewayAdminServiceClient(gc)
	d.ctx = metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	if d.db, err = pgxpool.New(context.Background(), o.dbURL); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer d.db.Close()

	// Faults for the run; the previous configuration comes back at the end.
	prev, err := d.gwAdm.GetFaults(d.ctx, &gatewayv1.GetFaultsRequest{})
	if err != nil {
		return fmt.Errorf("gateway-sim at %s: %w (is the stack up? make up)", o.gwAddr, rpcError(err))
	}
	if _, err := d.gwAdm.SetFaults(d.ctx, &gatewayv1.SetFaultsRequest{Faults: &gatewayv1.Faults{
		LatencyMinMs: 5, LatencyMaxMs: 30, UnavailableRate: o.unavailable, TimeoutAfterCommitRate: o.lost}}); err != nil {
		return fmt.Errorf("set faults: %w", rpcError(err))
	}
	defer d.gwAdm.SetFaults(context.WithoutCancel(d.ctx), &gatewayv1.SetFaultsRequest{Faults: prev.GetFaults()}) //nolint:errcheck
	fmt.Fprintf(g.out, "gateway faults: %.0f%% unavailable, %.0f%% timeout after commit, 5-30 ms latency; payees \"decline-*\" are declined\n",
		100*o.unavailable, 100*o.lost)

	notes := d.watchNotifications()
	defer notes.stop()
	ids, err := d.schedule()
	if err != nil {
		return err
	}
	if err := d.watch(ids); err != nil {
		return err
	}
	return d.summary(ids, notes)
}

func (d *demoRun) schedule() ([]string, error) {
	d.from = time.Now().Add(3 * time.Second)
	d.to = d.from.Add(d.o.within)
	n := d.o.n
	var items []*payschedv1.CreateScheduledPaymentRequest
	for i := range n {
		payee := fmt.Sprintf("merchant-%03d", i%50)
		if i%25 == 7 {
			payee = "decline-" + payee // declined by rule: FAILED
		}
		due := d.from.Add(time.Duration(i) * d.o.within / time.Duration(max(n, 1)))
		items = append(items, &payschedv1.CreateScheduledPaymentRequest{Payee: payee, Amount: int64(500 + 37*i),
			Currency: "USD", DueAt: timestamppb.New(due), RequestId: uuid.NewString(), Description: "paysched demo"})
	}
	var ids []string
	for i := 0; i < len(items); i += 1000 {
		resp, err := d.api.BatchCreateScheduledPayments(d.ctx, &payschedv1.BatchCreateScheduledPaymentsRequest{Items: items[i:min(len(items), i+1000)]})
		if err != nil {
			return nil, fmt.Errorf("schedule: %w", rpcError(err))
		}
		for _, r := range resp.GetResults() {
			if r.GetOutcome() == payschedv1.BatchCreateResult_OUTCOME_REJECTED {
				return nil, fmt.Errorf("item %d rejected: %s %s", r.GetIndex(), r.GetReason(), r.GetMessage())
			}
			ids = append(ids, r.GetPayment().GetPaymentId())
		}
	}
	fmt.Fprintf(d.g.out, "scheduled %d payments for actor %s, due from %s over %s\n\n", n, d.actor,
		d.from.UTC().Format("15:04:05"), d.o.within)
	return ids, nil
}

// The live view's queries: this run's payments only (its payer, its due range).
const (
	demoStatusSQL = `SELECT status, count(*) FROM payments WHERE payer = $1 AND due_time BETWEEN $2 AND $3 GROUP BY status`
	demoOldestSQL = `SELECT coalesce(extract(epoch FROM now() - min(due_time)), 0) FROM payments
		WHERE payer = $1 AND due_time BETWEEN $2 AND $3 AND status = 'PENDING' AND run_at <= now()`
	// Lateness: first attempt's start minus the due time.
	demoLateSQL = `SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY l), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY l), 0),
		coalesce(max(l), 0), count(*)
		FROM (SELECT extract(epoch FROM a.started_at - p.due_time) AS l FROM payments p
		      JOIN payment_attempts a ON a.payment_id = p.id AND a.attempt = (SELECT min(attempt) FROM payment_attempts WHERE payment_id = p.id)
		      WHERE p.payer = $1 AND p.due_time BETWEEN $2 AND $3) x`
	demoOutcomesSQL = `SELECT coalesce(a.outcome, 'IN_FLIGHT'), count(*) FROM payments p JOIN payment_attempts a ON a.payment_id = p.id
		WHERE p.payer = $1 AND p.due_time BETWEEN $2 AND $3 GROUP BY 1`
)

type lateness struct {
	p50, p99, max float64
	n             int64
}

func (d *demoRun) counts(sql string) (map[string]int64, error) {
	rows, err := d.db.Query(d.ctx, sql, d.actor, d.from, d.to)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var k string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil })
	return out, err
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
	deadline := start.Add(d.o.timeout)
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
		if err := d.db.QueryRow(d.ctx, demoOldestSQL, d.actor, d.from, d.to).Scan(&oldest); err != nil {
			return fmt.Errorf("live view: %w", err)
		}
		l, err := d.lateness()
		if err != nil {
			return fmt.Errorf("live view: %w", err)
		}
		fmt.Fprintf(d.g.out, "t=%3.0fs  %-70s | oldest due %4.1fs | lateness p50 %.2fs p99 %.2fs | gateway: %s\n",
			time.Since(start).Seconds(),
			mix(st, "PENDING", "PROCESSING", "COMPLETED", "FAILED", "DEAD_LETTERED", "CANCELLED"),
			oldest, l.p50, l.p99, mix(out, "SUCCEEDED", "DECLINED", "RETRYABLE", "AMBIGUOUS", "ABANDONED", "IN_FLIGHT"))
		if st["PENDING"]+st["PROCESSING"] == 0 && len(st) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d payments still open after %s: is the engine running (make up)?", st["PENDING"]+st["PROCESSING"], d.o.timeout)
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(d.o.brokers, ",")...),
		kgo.ConsumeTopics(kafka.TopicNotifications), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
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
				var id string
				for _, h := range r.Headers {
					if h.Key == "ce_id" {
						id = string(h.Value)
					}
				}
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

func (d *demoRun) summary(ids []string, notes *notifications) error {
	out := d.g.out
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
		return fmt.Errorf("gateway report: %w", rpcError(err))
	}
	// The audit log and the notifications trail the engine by the CDC lag:
	// wait (bounded) until every payment's terminal status is audited and
	// every creation and terminal transition notified.
	var audited, auditedTerminal int64
	want := 2 * len(ids)
	wait := time.Now().Add(30 * time.Second)
	for {
		if err := d.db.QueryRow(d.ctx, `SELECT count(*), count(DISTINCT payment_id) FILTER (WHERE table_name = 'payments' AND status IN ('COMPLETED','FAILED','CANCELLED','DEAD_LETTERED'))
			FROM audit_events WHERE payment_id = ANY($1::uuid[])`, ids).Scan(&audited, &auditedTerminal); err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		if distinct, _ := notes.count(); (auditedTerminal >= int64(len(ids)) && distinct >= want) || time.Now().After(wait) {
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
	fmt.Fprintf(out, "  gateway        %d charges for this run's payments, %d COMPLETED payments, %d mismatched\n", charged, st["COMPLETED"], mismatched)
	fmt.Fprintf(out, "  double charges %d (gateway-wide)\n", len(rep.GetDoubleCharged()))
	fmt.Fprintf(out, "  audit events   %d rows (%d of %d payments' terminal status audited)\n", audited, auditedTerminal, len(ids))
	if notes.err != nil {
		fmt.Fprintf(out, "  notifications  unavailable: %v\n", notes.err)
	} else {
		fmt.Fprintf(out, "  notifications  %d distinct ce_id (%d delivered; expected %d: creation + terminal per payment)\n", distinct, total, want)
	}
	recon := d.reconcile(out)

	var bad []string
	if charged != int(st["COMPLETED"]) || mismatched > 0 {
		bad = append(bad, fmt.Sprintf("gateway charges %d != COMPLETED %d (mismatched %d)", charged, st["COMPLETED"], mismatched))
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
	ctx, cancel := context.WithTimeout(d.ctx, 2*time.Minute)
	defer cancel()
	resp, err := d.admin.TriggerReconciliationRun(ctx, &payschedv1.TriggerReconciliationRunRequest{Day: time.Now().UTC().Format(time.DateOnly)})
	if err != nil {
		fmt.Fprintf(out, "  reconciliation could not run: %v\n", rpcError(err))
		return nil // the books above are checked directly; the run is a bonus
	}
	r := resp.GetRun()
	fmt.Fprintf(out, "  reconciliation run %d of %s: %s, %d charges, %d COMPLETED payments, %d repaired, %d mismatches\n",
		r.GetRunId(), r.GetDay(), r.GetState(), r.GetCharges(), r.GetPayments(), r.GetRepaired(), r.GetMismatches())
	for _, it := range r.GetItems() {
		fmt.Fprintf(out, "    %s %s payment=%s %s\n", it.GetSeverity(), it.GetKind(), it.GetPaymentId(), it.GetDetail())
	}
	if r.GetState() != "SUCCEEDED" {
		return fmt.Errorf("reconciliation run %s: %s", r.GetState(), r.GetError())
	}
	if r.GetMismatches() > 0 {
		return fmt.Errorf("reconciliation found %d mismatches", r.GetMismatches())
	}
	return nil
}
