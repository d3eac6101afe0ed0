package enginetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/pkg/engine/sweeper"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store"
)

// claimOne claims the one due payment with lease, as a sweeper would.
func claimOne(t *testing.T, c *cluster, lease time.Duration) store.Claimed {
	t.Helper()
	claimed, err := store.Claim(context.Background(), c.db, "sweeper-t", lease, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", err, claimed)
	}
	return claimed[0]
}

func workItem(cl store.Claimed) *internalv1.WorkItem {
	return &internalv1.WorkItem{PaymentId: cl.ID.String(), DueTime: timestamppb.New(cl.DueTime), Attempt: cl.Attempt}
}

// Money rule 5: an executor never starts a charge its claim's lease
// cannot hold: the claim goes back untouched, nothing charged, no budget
// spent.
func TestNoChargeOutlivesItsLease(t *testing.T) {
	c := newCluster(t, opts{chargeTO: 2 * time.Second, noReaper: true})
	c.stop() // no sweeper: the test claims by hand
	id := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
	time.Sleep(100 * time.Millisecond)
	cl := claimOne(t, c, time.Second)
	got, err := execute(t, c.execs[0], workItem(cl))
	if err != nil || got[id.String()] != internalv1.Result_RESULT_RELEASED {
		t.Fatalf("outcome %v %v, want RELEASED", got, err)
	}
	if r := c.report(); r.GetCharges() != 0 {
		t.Fatalf("%d charges under a lease shorter than the charge's deadline", r.GetCharges())
	}
	if as := c.attempts(id); len(as) != 0 {
		t.Fatalf("attempts %+v, want none (never started)", as)
	}
	var retries, releases int
	var st string
	if err := c.db.QueryRow(context.Background(), `SELECT status, retries, releases FROM payments WHERE id = $1`, id).Scan(&st, &retries, &releases); err != nil {
		t.Fatal(err)
	}
	if st != "PENDING" || retries != 0 || releases != 1 {
		t.Fatalf("%s retries %d releases %d: a release costs no budget and is counted", st, retries, releases)
	}
}

// A payment whose claims are released untouched again and again (its
// lease never holds a charge) is dead-lettered LEASE_TOO_SHORT after
// --max-releases, instead of looping claim, release, claim forever with
// its attempt number growing and nothing charged or learned.
func TestReleasedTooOftenIsDeadLetteredLeaseTooShort(t *testing.T) {
	c := newCluster(t, opts{chargeTO: 2 * time.Second, noReaper: true})
	c.stop()
	id := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
	time.Sleep(100 * time.Millisecond)
	var last internalv1.Result
	for i := 0; i < 10 && last != internalv1.Result_RESULT_DEAD_LETTERED; i++ {
		got, err := execute(t, c.execs[0], workItem(claimOne(t, c, time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		last = got[id.String()]
	}
	st, reason := c.status(id)
	if st != "DEAD_LETTERED" || reason != "LEASE_TOO_SHORT" {
		t.Fatalf("%s %s, want DEAD_LETTERED LEASE_TOO_SHORT", st, reason)
	}
	var attempt int
	if err := c.db.QueryRow(context.Background(), `SELECT attempt FROM payments WHERE id = $1`, id).Scan(&attempt); err != nil || attempt != 5 {
		t.Fatalf("attempt %d (%v): dead-lettered at the 5th release (the default --max-releases)", attempt, err)
	}
	if r := c.report(); r.GetCharges() != 0 {
		t.Fatalf("%d charges", r.GetCharges())
	}
}

// A sweeper learns, when it connects, the shortest lease each executor can
// work under, and gives no work to one its --lease is shorter than: no
// claim, so no attempt number spent and nothing released in a loop.
func TestSweeperRefusesALeaseShorterThanItsExecutorsNeed(t *testing.T) {
	c := newCluster(t, opts{lease: time.Second, chargeTO: 2 * time.Second, noReaper: true})
	c.stop()
	id := c.schedule(1, "bob", soon())[0]
	reg := prometheus.NewRegistry()
	sw, err := sweeper.New(sweeper.Config{ID: "sweeper-short", Interval: 20 * time.Millisecond, Batch: 10, Lease: time.Second,
		Executors: c.execs, Slots: 1, Grace: time.Second, Bucket: pacing.Bucket{Name: "gateway"}}, c.db, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sw.Run(ctx) }()
	// The sweeper has asked the executor (the gauge says so), then goes on
	// sweeping a while: it must claim nothing for it.
	for deadline := time.Now().Add(10 * time.Second); gauge(t, reg, "paysched_sweeper_executors_refused") != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper never reported the executor refused")
		}
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-done
	var st string
	var attempt int
	if err := c.db.QueryRow(context.Background(), `SELECT status, attempt FROM payments WHERE id = $1`, id).Scan(&st, &attempt); err != nil {
		t.Fatal(err)
	}
	if st != "PENDING" || attempt != 0 {
		t.Fatalf("%s at attempt %d: an executor that cannot work under a 1s lease was given the claim", st, attempt)
	}
}

// gauge reads one gauge of reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// watchProbes records the deadline every GetCharge was given, then holds
// it until its context ends, or (atOnce) answers UNAVAILABLE at once.
type watchProbes struct {
	gateway.Gateway
	atOnce    bool
	mu        sync.Mutex
	deadlines []time.Time
}

func (w *watchProbes) GetCharge(ctx context.Context, req *gatewayv1.GetChargeRequest) (*gatewayv1.Charge, error) {
	d, _ := ctx.Deadline()
	w.mu.Lock()
	w.deadlines = append(w.deadlines, d)
	w.mu.Unlock()
	if w.atOnce {
		return nil, status.Error(codes.Unavailable, "probe unanswered")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// Every call of an attempt ends by its lease's end less the margin,
// whatever its own timeout: a charge whose answer is lost is probed at
// once, and that probe (here one that never answers, with a timeout far
// longer than the lease) is cut at the lease, so the outcome is recorded
// while the claim is still held. The lease (5 s) is far longer than the
// charge needs (0.6 s), so a slow machine between the claim and the
// executor's read never turns the attempt into a release.
func TestCallsEndByTheLease(t *testing.T) {
	w := &watchProbes{}
	c := newCluster(t, opts{chargeTO: 500 * time.Millisecond, probeTO: time.Minute, noReaper: true,
		faults: &gatewayv1.Faults{UnavailableAfterCommitRate: 1},
		wrapGW: func(g gateway.Gateway) gateway.Gateway { w.Gateway = g; return w }})
	c.stop()
	id := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
	time.Sleep(100 * time.Millisecond)
	cl := claimOne(t, c, 5*time.Second)
	var leaseUntil time.Time
	if err := c.db.QueryRow(context.Background(), `SELECT lease_until FROM payments WHERE id = $1`, id).Scan(&leaseUntil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := execute(t, c.execs[0], workItem(cl))
	if err != nil || got[id.String()] != internalv1.Result_RESULT_RETRY {
		t.Fatalf("outcome %v %v, want RETRY (charged, answer lost, probe unanswered)", got, err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the attempt took %s: its 1 min probe outlived the 5 s lease", took)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.deadlines) != 1 || w.deadlines[0].After(leaseUntil.Add(-100*time.Millisecond).Add(50*time.Millisecond)) {
		t.Fatalf("probe deadlines %v; the lease ends %v (margin 100ms)", w.deadlines, leaseUntil)
	}
	var probeFirst bool
	if err := c.db.QueryRow(context.Background(), `SELECT probe_first FROM payments WHERE id = $1`, id).Scan(&probeFirst); err != nil || !probeFirst {
		t.Fatalf("probe_first %v (%v): a lost answer with an unanswered probe may have charged", probeFirst, err)
	}
}

// slowAnswers is a database whose answers to the executor's read of a
// batch arrive late, after the database measured the lease left.
type slowAnswers struct {
	pgdb.DB
	delay time.Duration
}

func (s slowAnswers) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := s.DB.Query(ctx, sql, args...)
	if strings.Contains(sql, "lease_until - clock_timestamp()") {
		time.Sleep(s.delay)
	}
	return rows, err
}

// The lease left is counted from before the batch's read was sent: the
// database measures it, and an answer that comes back late must not be
// counted as more lease. Here the read's answer takes 1.5 s of a 10 s
// lease; the probe after a lost answer must still be given a deadline by
// the lease's end less the margin (counted from after the read, it would
// get 1.5 s more). The lease is long so that a slow machine never turns
// the attempt into a release, and the probe answers at once.
func TestLeaseIsCountedFromBeforeTheRead(t *testing.T) {
	w := &watchProbes{atOnce: true}
	c := newCluster(t, opts{chargeTO: 500 * time.Millisecond, probeTO: time.Minute, noReaper: true,
		faults: &gatewayv1.Faults{UnavailableAfterCommitRate: 1},
		wrapGW: func(g gateway.Gateway) gateway.Gateway { w.Gateway = g; return w },
		wrapDB: func(db pgdb.DB) pgdb.DB { return slowAnswers{DB: db, delay: 1500 * time.Millisecond} }})
	c.stop()
	id := c.schedule(1, "bob", time.Now().Add(50*time.Millisecond))[0]
	time.Sleep(100 * time.Millisecond)
	cl := claimOne(t, c, 10*time.Second)
	var leaseUntil time.Time
	if err := c.db.QueryRow(context.Background(), `SELECT lease_until FROM payments WHERE id = $1`, id).Scan(&leaseUntil); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, c.execs[0], workItem(cl)); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.deadlines) != 1 || w.deadlines[0].After(leaseUntil.Add(-100*time.Millisecond).Add(50*time.Millisecond)) {
		t.Fatalf("probe deadlines %v; the lease ends %v (margin 100ms): the read's 1.5 s were counted as lease", w.deadlines, leaseUntil)
	}
}
