package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
	"github.com/paysched/paysched/tools/gatewaysim"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	t      *testing.T
	db     *pgxpool.Pool
	ledger *gatewaysim.MemLedger
	sim    *gatewaysim.Server
	gw     gateway.Gateway
	day    time.Time
}

// newEnv's day is yesterday, as for the daily run in production: a
// finished day, whose payments are dated on it (paymentDue), so nothing
// the test does depends on the hour it runs at, or on a midnight passing
// while it runs.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, db: pgtest.NewPool(t), ledger: gatewaysim.NewMemLedger(), day: reconcile.Day(time.Now()).AddDate(0, 0, -1)}
	e.sim = gatewaysim.New(e.ledger, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, e.sim)
	gatewayv1.RegisterGatewayAdminServiceServer(gs, e.sim)
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); gs.Stop() })
	e.gw = gateway.FromClient(gatewayv1.NewGatewayServiceClient(cc))
	return e
}

// payment creates a payment due early on the test day and forces its
// status (and, for ambiguous leftovers, an AMBIGUOUS attempt).
func (e *env) payment(status, reason string, amount int64) uuid.UUID {
	e.t.Helper()
	return e.paymentDue(e.day.Add(time.Minute), status, reason, amount)
}

// overdue is payment for the resolver's tests: due ten minutes ago, so a
// test that sets run_at a minute or two back stays past due_time (run_at >=
// due_time) even in the first minutes of a UTC day, when a payment due early
// on the test day would still be due.
func (e *env) overdue(status, reason string, amount int64) uuid.UUID {
	e.t.Helper()
	return e.paymentDue(time.Now().Add(-10*time.Minute), status, reason, amount)
}

// paymentDue is payment due at due, last updated a minute after.
func (e *env) paymentDue(due time.Time, status, reason string, amount int64) uuid.UUID {
	e.t.Helper()
	id, _ := uuid.NewV7()
	_, err := store.NewStore(e.db).Create(context.Background(), []store.NewPayment{{ID: id, Payer: "alice", Payee: "bob",
		Amount: amount, Currency: "USD", DueAt: due, CreatedAt: time.Now(), IdempotencyKey: id.String(),
		RequestHash: []byte{1}, Response: []byte{1}}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.exec(`UPDATE payments SET status = $2, dead_letter_reason = NULLIF($3, ''), attempt = 1, updated_at = $4 WHERE id = $1`,
		id, status, reason, due.Add(time.Minute))
	outcome := map[string]string{"COMPLETED": "SUCCEEDED", "FAILED": "DECLINED", "CANCELLED": ""}[status]
	if _, known := map[string]bool{"COMPLETED": true, "FAILED": true, "CANCELLED": true}[status]; !known {
		outcome = "AMBIGUOUS"
	}
	if outcome != "" {
		e.exec(`INSERT INTO payment_attempts (payment_id, attempt, started_at, finished_at, gateway_key, outcome, executor_id)
			VALUES ($1::uuid, 1, $4, $4, $2, $3, 'test')`, id, id.String(), outcome, due.Add(time.Minute))
	}
	return id
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// charge records a settled charge in the gateway's ledger at `at`.
func (e *env) charge(key, ref string, amount int64, at time.Time) string {
	e.t.Helper()
	c := &gatewaysim.Charge{ID: "ch_" + uuid.NewString(), Key: key, Reference: ref, Amount: amount, Currency: "USD",
		Payer: "alice", Payee: "bob", CreatedAt: at}
	if _, _, err := e.ledger.Record(context.Background(), c); err != nil {
		e.t.Fatal(err)
	}
	return c.ID
}

func (e *env) status(id uuid.UUID) (string, string) {
	e.t.Helper()
	var st, ref string
	if err := e.db.QueryRow(context.Background(), `SELECT status, coalesce(gateway_ref, '') FROM payments WHERE id = $1`, id).Scan(&st, &ref); err != nil {
		e.t.Fatal(err)
	}
	return st, ref
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func kinds(items []reconcile.Item) map[string][]string {
	out := map[string][]string{}
	for _, it := range items {
		out[it.Kind] = append(out[it.Kind], it.Reference)
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

func TestDailyRunFindsEveryMismatchAndRepairs(t *testing.T) {
	e := newEnv(t)
	at := e.day.Add(2 * time.Minute)
	ok := e.payment("COMPLETED", "", 100)
	e.charge(ok.String(), ok.String(), 100, at)
	deadWithCharge := e.payment("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 200)
	chDead := e.charge(deadWithCharge.String(), deadWithCharge.String(), 200, at)
	pendingWithCharge := e.payment("PENDING", "", 300)
	e.charge(pendingWithCharge.String(), pendingWithCharge.String(), 300, at)
	failedWithCharge := e.payment("FAILED", "", 350)
	e.charge(failedWithCharge.String(), failedWithCharge.String(), 350, at)
	missing := e.payment("COMPLETED", "", 400)
	wrongAmount := e.payment("COMPLETED", "", 500)
	e.charge(wrongAmount.String(), wrongAmount.String(), 501, at)
	dup := e.payment("COMPLETED", "", 600)
	e.charge(dup.String(), dup.String(), 600, at)
	e.charge("other-key-"+dup.String(), dup.String(), 600, at.Add(time.Second))
	e.charge("stray-key", "no-such-payment", 700, at)
	// Charged a second before the day began, completed on it: consistent.
	lateNight := e.payment("COMPLETED", "", 800)
	e.charge(lateNight.String(), lateNight.String(), 800, e.day.Add(-time.Second))
	untouched := e.payment("CANCELLED", "", 900)

	m := reconcile.NewMetrics(prometheusRegistry())
	r := &reconcile.Runner{DB: e.db, Gateway: e.gw, PageSize: 2, Metrics: m, Log: quiet}
	run, err := r.Run(context.Background(), e.day, "test")
	if err != nil {
		t.Fatal(err)
	}
	got := kinds(run.Items)
	want := map[string][]string{
		reconcile.KindRepaired:         sorted(deadWithCharge.String(), pendingWithCharge.String(), failedWithCharge.String()),
		reconcile.KindMissingAtGateway: {missing.String()},
		reconcile.KindAmountMismatch:   {wrongAmount.String()},
		reconcile.KindDuplicateCharge:  {dup.String()},
		reconcile.KindUnknownCharge:    {"no-such-payment"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("items:\n got %v\nwant %v", got, want)
	}
	if run.State != "SUCCEEDED" || run.Repaired != 3 || run.Mismatches != 4 || run.Charges != 8 || run.Payments != 5 {
		t.Fatalf("run = %+v", run)
	}
	for _, id := range []uuid.UUID{deadWithCharge, pendingWithCharge, failedWithCharge} {
		if st, ref := e.status(id); st != "COMPLETED" || ref == "" {
			t.Fatalf("%s: %s ref %q, want COMPLETED with the charge", id, st, ref)
		}
	}
	if _, ref := e.status(deadWithCharge); ref != chDead {
		t.Fatalf("gateway_ref %s, want %s", ref, chDead)
	}
	for _, id := range []uuid.UUID{ok, missing, wrongAmount, dup, lateNight} {
		if st, _ := e.status(id); st != "COMPLETED" {
			t.Fatalf("%s moved to %s", id, st)
		}
	}
	if st, _ := e.status(untouched); st != "CANCELLED" {
		t.Fatalf("cancelled payment moved to %s", st)
	}
	// Every repair is audited with its previous status and the run.
	if n := e.count(`SELECT count(*) FROM payment_actions WHERE action = 'REPAIR' AND run_id = $1 AND actor = 'reconciler'
		AND ((payment_id = $2 AND prev_status = 'DEAD_LETTERED') OR (payment_id = $3 AND prev_status = 'PENDING')
		  OR (payment_id = $4 AND prev_status = 'FAILED'))`, run.ID, deadWithCharge, pendingWithCharge, failedWithCharge); n != 3 {
		t.Fatalf("repair actions = %d, want 3", n)
	}

	// A second run of the day changes nothing and finds the same mismatches.
	before := e.count(`SELECT count(*) FROM payments WHERE updated_at > now() - interval '1 hour'`)
	var lastUpdate time.Time
	_ = e.db.QueryRow(context.Background(), `SELECT max(updated_at) FROM payments`).Scan(&lastUpdate)
	again, err := r.Run(context.Background(), e.day, "test")
	if err != nil {
		t.Fatal(err)
	}
	delete(want, reconcile.KindRepaired)
	if got := kinds(again.Items); fmt.Sprint(got) != fmt.Sprint(want) || again.Repaired != 0 || again.Mismatches != 4 {
		t.Fatalf("second run: repaired %d, items %v", again.Repaired, got)
	}
	var lastUpdate2 time.Time
	_ = e.db.QueryRow(context.Background(), `SELECT max(updated_at) FROM payments`).Scan(&lastUpdate2)
	if !lastUpdate2.Equal(lastUpdate) || e.count(`SELECT count(*) FROM payments WHERE updated_at > now() - interval '1 hour'`) != before {
		t.Fatal("the second run changed payments")
	}
	if n := e.count(`SELECT count(*) FROM payment_actions`); n != 3 {
		t.Fatalf("actions after the second run = %d, want 3", n)
	}
	runs, err := reconcile.Runs(context.Background(), e.db, e.day, 0, 10)
	if err != nil || len(runs) != 2 || runs[0].ID != again.ID || len(runs[1].Items) != 7 {
		t.Fatalf("Runs = %d runs, err %v", len(runs), err)
	}
}

func TestRunFailsCleanlyWhenTheGatewayIsDown(t *testing.T) {
	e := newEnv(t)
	cc, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	p := e.payment("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 100)
	r := &reconcile.Runner{DB: e.db, Gateway: gateway.FromClient(gatewayv1.NewGatewayServiceClient(cc)), Log: quiet}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	run, err := r.Run(ctx, e.day, "test")
	if err == nil || run == nil || run.State != "FAILED" || run.Error == "" {
		t.Fatalf("run %+v err %v, want a FAILED run", run, err)
	}
	if st, _ := e.status(p); st != "DEAD_LETTERED" {
		t.Fatalf("moved to %s", st)
	}
	if n := e.count(`SELECT count(*) FROM reconciliation_runs WHERE state = 'FAILED' AND finished_at IS NOT NULL`); n != 1 {
		t.Fatalf("failed runs recorded = %d", n)
	}
}

func TestResolverSettlesAmbiguousDeadLetters(t *testing.T) {
	e := newEnv(t)
	at := time.Now()
	charged := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 100)
	ch := e.charge(charged.String(), charged.String(), 100, at)
	declined := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 200)
	if _, _, err := e.ledger.Record(context.Background(), &gatewaysim.Charge{ID: "ch_d", Key: declined.String(),
		Reference: declined.String(), Amount: 200, Currency: "USD", Payer: "alice", Payee: "bob", Declined: true,
		DeclineReason: "insufficient_funds", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	never := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 300)
	exhausted := e.overdue("DEAD_LETTERED", "RETRIES_EXHAUSTED", 400)
	e.exec(`UPDATE payments SET retries = 5, run_at = now() - interval '1 minute' WHERE status = 'DEAD_LETTERED'`)

	res := &reconcile.Resolver{DB: e.db, Gateway: e.gw, Log: quiet}
	n, err := res.Once(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("settled %d, err %v; want 3", n, err)
	}
	if st, ref := e.status(charged); st != "COMPLETED" || ref != ch {
		t.Fatalf("charged: %s %s", st, ref)
	}
	if st, _ := e.status(declined); st != "FAILED" {
		t.Fatalf("declined: %s", st)
	}
	var retries int
	st, _ := e.status(never)
	_ = e.db.QueryRow(context.Background(), `SELECT retries FROM payments WHERE id = $1`, never).Scan(&retries)
	if st != "PENDING" || retries != 0 {
		t.Fatalf("never charged: %s retries %d, want PENDING with a fresh budget", st, retries)
	}
	if st, _ := e.status(exhausted); st != "DEAD_LETTERED" {
		t.Fatalf("retries-exhausted dead letter moved to %s", st)
	}
	if n := e.count(`SELECT count(*) FROM payment_actions WHERE action = 'RESOLVE_AMBIGUOUS'`); n != 3 {
		t.Fatalf("actions = %d", n)
	}

	// An unanswered probe backs off instead of spinning.
	later := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 500)
	e.exec(`UPDATE payments SET run_at = now() - interval '1 minute' WHERE id = $1`, later)
	_, _ = e.sim.SetFaults(context.Background(), &gatewayv1.SetFaultsRequest{Faults: &gatewayv1.Faults{Outage: true}})
	if n, err := res.Once(context.Background()); err != nil || n != 0 {
		t.Fatalf("during an outage settled %d, err %v", n, err)
	}
	if n := e.count(`SELECT count(*) FROM payments WHERE id = $1 AND status = 'DEAD_LETTERED' AND probes = 1 AND run_at > now()`, later); n != 1 {
		t.Fatal("an unanswered probe was not postponed")
	}
	if n, _ := res.Once(context.Background()); n != 0 {
		t.Fatal("a postponed probe ran again at once")
	}
}

// The resolver acts on "no charge" only when the gateway proved it: an
// index that may lag (and a listing that fails) leaves the dead letter
// where it is, probed again later, never re-driven as uncharged.
func TestResolverNeedsAProvenAbsence(t *testing.T) {
	e := newEnv(t)
	never := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 300)
	e.exec(`UPDATE payments SET run_at = now() - interval '1 minute' WHERE id = $1`, never)
	_, _ = e.sim.SetFaults(context.Background(), &gatewayv1.SetFaultsRequest{Faults: &gatewayv1.Faults{ProbeLagMs: 60_000, ProbeUnprovenRate: 1}})
	res := &reconcile.Resolver{DB: e.db, Gateway: e.gw, Log: quiet}
	if n, err := res.Once(context.Background()); err != nil || n != 0 {
		t.Fatalf("settled %d, err %v; want none", n, err)
	}
	if n := e.count(`SELECT count(*) FROM payments WHERE id = $1 AND status = 'DEAD_LETTERED' AND probes = 1 AND run_at > now()`, never); n != 1 {
		t.Fatal("an unproven absence must postpone the dead letter, not re-drive it")
	}
}

// A charge still waiting for the customer's authentication past its bound
// is cancelled at the gateway by the resolver, and the payment FAILED
// AUTHENTICATION_REQUIRED; within its bound it is asked about again.
func TestResolverCancelsAnUndecidedChargePastItsBound(t *testing.T) {
	e := newEnv(t)
	stuck := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 100)
	fresh := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 200)
	for id, age := range map[uuid.UUID]time.Duration{stuck: 2 * time.Hour, fresh: time.Minute} {
		if _, _, err := e.ledger.Record(context.Background(), &gatewaysim.Charge{ID: "ch_" + id.String()[:8], Key: id.String(),
			Reference: id.String(), Amount: map[uuid.UUID]int64{stuck: 100, fresh: 200}[id], Currency: "USD", Payer: "alice", Payee: "bob",
			Pending: gatewaysim.PendingAction, CreatedAt: time.Now().Add(-age)}); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(`UPDATE payments SET run_at = now() - interval '1 minute' WHERE status = 'DEAD_LETTERED'`)
	res := &reconcile.Resolver{DB: e.db, Gateway: e.gw, Bounds: gateway.Bounds{Action: time.Hour}, Log: quiet}
	if n, err := res.Once(context.Background()); err != nil || n != 1 {
		t.Fatalf("settled %d, err %v; want 1", n, err)
	}
	var st, why string
	if err := e.db.QueryRow(context.Background(), `SELECT status, coalesce(failure_reason, '') FROM payments WHERE id = $1`, stuck).Scan(&st, &why); err != nil {
		t.Fatal(err)
	}
	if st != "FAILED" || why != "AUTHENTICATION_REQUIRED" {
		t.Fatalf("past its bound: %s %q", st, why)
	}
	if c, _ := e.ledger.Get(context.Background(), stuck.String()); !c.Declined || !strings.HasPrefix(c.DeclineReason, "canceled") {
		t.Fatalf("the gateway holds %+v: it must have been cancelled there", c)
	}
	if st, _ := e.status(fresh); st != "DEAD_LETTERED" {
		t.Fatalf("within its bound: %s", st)
	}
}

// A dead letter the resolver cannot move (the database refuses it) is
// postponed like an unanswered one, counted, and the rows behind it are
// still settled: one bad row never stalls the rest.
func TestResolverAdvancesPastARowItCannotMove(t *testing.T) {
	e := newEnv(t)
	stuck := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 100)
	e.charge(stuck.String(), stuck.String(), 100, time.Now())
	next := e.overdue("DEAD_LETTERED", "AMBIGUOUS_UNRESOLVED", 200)
	e.exec(`UPDATE payments SET run_at = now() - interval '2 minutes' WHERE id = $1`, stuck)
	e.exec(`UPDATE payments SET run_at = now() - interval '1 minute' WHERE id = $1`, next)
	e.exec(`CREATE FUNCTION refuse_stuck() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF NEW.id = '` + stuck.String() + `' AND NEW.status = 'COMPLETED' THEN
		    RAISE EXCEPTION 'refused' USING ERRCODE = '22021';
		  END IF;
		  RETURN NEW;
		END $$`)
	e.exec(`CREATE TRIGGER refuse_stuck BEFORE UPDATE ON payments FOR EACH ROW EXECUTE FUNCTION refuse_stuck()`)
	m := reconcile.NewMetrics(prometheusRegistry())
	res := &reconcile.Resolver{DB: e.db, Gateway: e.gw, Metrics: m, Log: quiet}
	if n, err := res.Once(context.Background()); err != nil || n != 1 {
		t.Fatalf("settled %d, err %v; want the row behind the bad one settled", n, err)
	}
	if st, _ := e.status(next); st != "PENDING" {
		t.Fatalf("the row behind: %s, want PENDING (proven never charged)", st)
	}
	if n := e.count(`SELECT count(*) FROM payments WHERE id = $1 AND status = 'DEAD_LETTERED' AND probes = 1 AND run_at > now()`, stuck); n != 1 {
		t.Fatal("the row that cannot move was not postponed")
	}
}

func sorted(s ...string) []string { sort.Strings(s); return s }

func prometheusRegistry() *prometheus.Registry { return prometheus.NewRegistry() }
