package fair_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/engine/fair"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// seed writes n PENDING payments of tenant, due ago.
func seed(t *testing.T, db *pgxpool.Pool, tenant string, n int, ago time.Duration) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
SELECT gen_random_uuid(), $1, 'payee', 100, 'USD', now() - $3::interval, now() - $3::interval, $1
FROM generate_series(1, $2)`, tenant, n, ago)
	if err != nil {
		t.Fatal(err)
	}
}

func newScheduler(t *testing.T, db *pgxpool.Pool, cfg fair.Config) (*fair.Scheduler, *store.Claimer) {
	t.Helper()
	s, err := fair.New(cfg, db)
	if err != nil {
		t.Fatal(err)
	}
	return s, &store.Claimer{DB: db, Owner: "sweeper-" + t.Name(), Lease: time.Minute}
}

func count(cs []store.Claimed) map[string]int {
	m := map[string]int{}
	for _, c := range cs {
		m[c.Tenant]++
	}
	return m
}

// A tenant with a big backlog due first does not starve the small ones due
// just after it: the first round already serves every small tenant, and
// the big one gets the rest. Claimed in due order (Unfair), the same round
// is all the big tenant's.
func TestSmallTenantsAreNotQueuedBehindABigOne(t *testing.T) {
	for _, unfair := range []bool{false, true} {
		db := pgtest.NewPool(t)
		seed(t, db, "big", 5000, 2*time.Second)
		small := []string{"s01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09", "s10"}
		for _, s := range small {
			seed(t, db, s, 5, time.Second)
		}
		sch, c := newScheduler(t, db, fair.Config{Unfair: unfair})
		got, err := sch.Claim(context.Background(), c, 200)
		if err != nil {
			t.Fatal(err)
		}
		n := count(got)
		if len(got) != 200 {
			t.Fatalf("unfair=%v: claimed %d of 200", unfair, len(got))
		}
		served := 0
		for _, s := range small {
			if n[s] > 0 {
				served++
			}
		}
		if unfair {
			if served != 0 {
				t.Fatalf("due order served %d small tenants before the big backlog: the test cannot tell", served)
			}
			continue
		}
		if served != len(small) || n["big"] < 200-5*len(small) {
			t.Fatalf("first round %v: every small tenant must be served at once, the big one gets the rest", n)
		}
	}
}

// While backlogged, a tenant of weight 2 gets twice the share of a tenant
// of weight 1; a tenant an operator set nothing for has weight 1.
func TestWeightsShareRounds(t *testing.T) {
	db := pgtest.NewPool(t)
	for _, tn := range []string{"heavy", "light1", "light2"} {
		seed(t, db, tn, 2000, time.Second)
	}
	if err := store.SetTenantLimits(context.Background(), db, store.TenantLimits{Tenant: "heavy", Weight: 2, UpdatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	sch, c := newScheduler(t, db, fair.Config{})
	total := map[string]int{}
	for range 10 {
		got, err := sch.Claim(context.Background(), c, 100)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range count(got) {
			total[k] += v
		}
	}
	for _, l := range []string{"light1", "light2"} {
		ratio := float64(total["heavy"]) / float64(total[l])
		if ratio < 1.8 || ratio > 2.2 {
			t.Fatalf("claims %v: heavy/%s = %.2f, want 2 (weight 2 against 1)", total, l, ratio)
		}
	}
	if total["heavy"]+total["light1"]+total["light2"] != 1000 {
		t.Fatalf("claims %v: 10 rounds of 100 while all are backlogged", total)
	}
}

// A tenant at its in-flight cap is skipped, not waited for: the others
// get the round, and the due-order remainder never takes the capped
// tenant's rows. Settled claims free its room again.
func TestInflightCapSkipsTheTenant(t *testing.T) {
	db := pgtest.NewPool(t)
	seed(t, db, "capped", 500, 2*time.Second)
	seed(t, db, "free", 500, time.Second)
	capN := 10
	if err := store.SetTenantLimits(context.Background(), db, store.TenantLimits{Tenant: "capped", Weight: 1, MaxInflight: &capN, UpdatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	sch, c := newScheduler(t, db, fair.Config{})
	ctx := context.Background()
	total := map[string]int{}
	var cappedIDs []string
	for range 5 {
		got, err := sch.Claim(ctx, c, 50)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range count(got) {
			total[k] += v
		}
		for _, cl := range got {
			if cl.Tenant == "capped" {
				cappedIDs = append(cappedIDs, cl.ID.String())
			}
		}
	}
	if total["capped"] != capN || total["free"] != 5*50-capN {
		t.Fatalf("claims %v: capped must stop at %d in flight, free gets the rest", total, capN)
	}
	if n := sch.Inflight()["capped"]; n != capN {
		t.Fatalf("in flight %d, want %d", n, capN)
	}
	// Another sweeper sees the cap as full: the count is cluster-wide.
	other, oc := newScheduler(t, db, fair.Config{})
	oc.Owner = "sweeper-other"
	if got, err := other.Claim(ctx, oc, 50); err != nil || count(got)["capped"] != 0 {
		t.Fatalf("another sweeper claimed %v (%v) of a tenant at its cap", count(got), err)
	}
	// Four settle.
	if _, err := db.Exec(ctx, `UPDATE payments SET status = 'COMPLETED', lease_until = NULL WHERE id::text = ANY($1)`, cappedIDs[:4]); err != nil {
		t.Fatal(err)
	}
	sch.Done("capped", 4)
	got, err := sch.Claim(ctx, c, 50)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(got)["capped"]; n != 4 {
		t.Fatalf("after 4 settled the capped tenant got %d, want 4", n)
	}
}

// A tenant's rate cap holds across sweepers: two schedulers claiming
// together take about rate × time of its rows, while an uncapped tenant
// is not slowed.
func TestRateCapAcrossSweepers(t *testing.T) {
	db := pgtest.NewPool(t)
	seed(t, db, "slow", 1000, time.Second)
	seed(t, db, "fast", 1000, time.Second)
	rate := 20.0
	if err := store.SetTenantLimits(context.Background(), db, store.TenantLimits{Tenant: "slow", Weight: 1, MaxRate: &rate, UpdatedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	total := map[string]int{}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 2 {
		s, err := fair.New(fair.Config{}, db)
		if err != nil {
			t.Fatal(err)
		}
		c := &store.Claimer{DB: db, Owner: "sweeper-" + string(rune('a'+i)), Lease: time.Minute}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < time.Second {
				got, err := s.Claim(context.Background(), c, 20)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for k, v := range count(got) {
					total[k] += v
				}
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start).Seconds()
	// A burst of one second's worth, then the rate.
	if limit := rate + rate*took + 1; float64(total["slow"]) > limit {
		t.Fatalf("claims %v in %.1fs: slow took more than its %g/s (limit %.0f)", total, took, rate, limit)
	}
	if total["slow"] == 0 || total["fast"] < 5*total["slow"] {
		t.Fatalf("claims %v: the capped tenant must go on, slowly, and the other must not wait for it", total)
	}
}

// Many sweepers claim the same tenants at once: each row goes to one of
// them (SKIP LOCKED in every tenant's share), and all are claimed.
func TestConcurrentFairClaimsTakeEachRowOnce(t *testing.T) {
	db := pgtest.NewPool(t)
	tenants := []string{"a", "b", "c", "d", "e"}
	for _, tn := range tenants {
		seed(t, db, tn, 400, time.Second)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	dup := 0
	var wg sync.WaitGroup
	for i := range 8 {
		s, err := fair.New(fair.Config{}, db)
		if err != nil {
			t.Fatal(err)
		}
		c := &store.Claimer{DB: db, Owner: "sweeper-" + string(rune('a'+i)), Lease: time.Minute}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				got, err := s.Claim(context.Background(), c, 25)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, cl := range got {
					if seen[cl.ID.String()] {
						dup++
					}
					seen[cl.ID.String()] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if dup != 0 || len(seen) != 2000 {
		t.Fatalf("%d rows claimed twice, %d of 2000 claimed", dup, len(seen))
	}
}

// More tenants than one walk visits: the cursor goes on where the last
// walk stopped, so every tenant is served within a few rounds.
func TestWalkBoundReachesEveryTenant(t *testing.T) {
	db := pgtest.NewPool(t)
	var tenants []string
	for i := range 12 {
		tn := string(rune('a'+i)) + "-tenant"
		tenants = append(tenants, tn)
		seed(t, db, tn, 5, time.Second)
	}
	sch, c := newScheduler(t, db, fair.Config{Walk: 3})
	total := map[string]int{}
	for range 12 {
		got, err := sch.Claim(context.Background(), c, 6)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range count(got) {
			total[k] += v
		}
	}
	for _, tn := range tenants {
		if total[tn] != 5 {
			t.Fatalf("claims %v: every tenant's 5 rows within 12 rounds of 6", total)
		}
	}
}

// The per-tenant metrics keep their cardinality bounded: the top tenants
// by claims get their own series, the rest are summed as "other".
func TestTenantMetricsAreBounded(t *testing.T) {
	db := pgtest.NewPool(t)
	for i := range fair.TopN + 5 {
		seed(t, db, fmt.Sprintf("t%02d", i), 1+i, time.Second)
	}
	sch, c := newScheduler(t, db, fair.Config{Unfair: true})
	if _, err := sch.Claim(context.Background(), c, 1000); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(sch)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "paysched_tenant_") {
			continue // not per tenant
		}
		labels := map[string]float64{}
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			labels[m.GetLabel()[0].GetValue()] = v
		}
		if len(labels) != fair.TopN+1 {
			t.Fatalf("%s has %d series, want %d (top %d and other)", mf.GetName(), len(labels), fair.TopN+1, fair.TopN)
		}
		if mf.GetName() == "paysched_tenant_claimed_total" {
			// t00..t04 claimed 1..5 each: the least, folded into other.
			if labels["other"] != 1+2+3+4+5 || labels["t14"] != 15 {
				t.Fatalf("claimed %v", labels)
			}
		}
	}
}

// seedLater writes one PENDING payment for each of n tenants (prefix and
// a number), due a second ago but run at in an hour (a backed-off retry):
// tenants holding rows, none due.
func seedLater(t *testing.T, db *pgxpool.Pool, prefix string, n int) {
	t.Helper()
	_, err := db.Exec(context.Background(), `
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
SELECT gen_random_uuid(), $1 || lpad(i::text, 6, '0'), 'payee', 100, 'USD', now() - interval '1 second',
       now() + interval '1 hour', $1 || lpad(i::text, 6, '0')
FROM generate_series(1, $2) i`, prefix, n)
	if err != nil {
		t.Fatal(err)
	}
}

// A due tenant whose name sorts after 300 tenants holding only later rows
// is served by the first claim, caps on: the walk lists due tenants only.
// (Walked by name, 256 at a time, the first window held no due tenant, and
// with a cap in force nothing else claimed.)
func TestADueTenantPastTheFirstWindowIsServed(t *testing.T) {
	db := pgtest.NewPool(t)
	seedLater(t, db, "a", 300)
	seed(t, db, "zzz", 10, time.Second)
	sch, c := newScheduler(t, db, fair.Config{Default: fair.Limits{MaxInflight: 100}})
	got, err := sch.Claim(context.Background(), c, 50)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(got); n["zzz"] != 10 || len(got) != 10 {
		t.Fatalf("claimed %v, want zzz's 10 rows", n)
	}
}

// Caps with a backlog: the first window's tenants are at their cap, and
// the rows left go to the due tenants past it in the same claim. A due
// row never waits while the sweeper and its tenant have room.
func TestCapsWithABacklogAreWorkConserving(t *testing.T) {
	db := pgtest.NewPool(t)
	seed(t, db, "capped-a", 100, 10*time.Second)
	seed(t, db, "capped-b", 100, 9*time.Second)
	seed(t, db, "open-c", 50, time.Second)
	for _, tn := range []string{"capped-a", "capped-b"} {
		five := 5
		if err := store.SetTenantLimits(context.Background(), db, store.TenantLimits{Tenant: tn, Weight: 1, MaxInflight: &five, UpdatedBy: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	sch, c := newScheduler(t, db, fair.Config{Walk: 2})
	got, err := sch.Claim(context.Background(), c, 60)
	if err != nil {
		t.Fatal(err)
	}
	n := count(got)
	if n["capped-a"] != 5 || n["capped-b"] != 5 || n["open-c"] != 50 {
		t.Fatalf("claimed %v, want 5, 5 and 50", n)
	}
	// At their caps, nothing more of theirs until outcomes come back.
	more, err := sch.Claim(context.Background(), c, 60)
	if err != nil {
		t.Fatal(err)
	}
	if len(more) != 0 {
		t.Fatalf("claimed %v past the caps", count(more))
	}
	// capped-a's five outcomes come back.
	if _, err := db.Exec(context.Background(), `UPDATE payments SET status = 'FAILED', lease_until = NULL, lease_owner = NULL
		WHERE tenant = 'capped-a' AND status = 'PROCESSING'`); err != nil {
		t.Fatal(err)
	}
	sch.Done("capped-a", 5)
	more, err = sch.Claim(context.Background(), c, 60)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(more); n["capped-a"] != 5 || len(more) != 5 {
		t.Fatalf("claimed %v once capped-a settled, want its next 5", n)
	}
}

// An idle sweeper, with 10,000 tenants holding later payments, sends at
// most two statements a poll, counted by pg_stat_statements (the test
// cluster preloads it; deploy/local/with-pg.sh).
func TestAnIdlePollIsOneStatement(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	seedLater(t, db, "later-", 10_000)
	sch, c := newScheduler(t, db, fair.Config{})
	// The first poll folds the 10,000 creates' wakeups.
	if got, err := sch.Claim(ctx, c, 100); err != nil || len(got) != 0 {
		t.Fatalf("claimed %d (%v) of nothing due", len(got), err)
	}
	if next := sch.NextDue(); next.IsZero() || time.Until(next) < 50*time.Minute {
		t.Fatalf("next due %v, want in about an hour", next)
	}
	var dbid uint32
	if err := db.QueryRow(ctx, `SELECT oid FROM pg_database WHERE datname = current_database()`).Scan(&dbid); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `SELECT pg_stat_statements_reset(0, $1, 0)`, dbid); err != nil {
		t.Fatalf("pg_stat_statements not loaded (run under deploy/local/with-pg.sh): %v", err)
	}
	const polls = 20
	for range polls {
		if got, err := sch.Claim(ctx, c, 100); err != nil || len(got) != 0 {
			t.Fatalf("claimed %d (%v) of nothing due", len(got), err)
		}
	}
	rows, err := db.Query(ctx, `SELECT calls, query FROM pg_stat_statements WHERE dbid = $1
		AND query NOT LIKE '%pg_stat_statements%'`, dbid)
	if err != nil {
		t.Fatal(err)
	}
	var calls int64
	var seen []string
	var n int64
	var q string
	for rows.Next() {
		if err := rows.Scan(&n, &q); err != nil {
			t.Fatal(err)
		}
		calls += n
		seen = append(seen, fmt.Sprintf("%d× %.80s", n, q))
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if calls > 2*polls {
		t.Fatalf("%d statements for %d idle polls, want at most %d: %v", calls, polls, 2*polls, seen)
	}
	t.Logf("%d idle polls: %d statements %v", polls, calls, seen)
}

// A settle that reads a tenant's rows before a writer commits loses
// nothing: the writer's wakeup, folded at the next walk, puts the tenant
// back in the queue.
func TestASettleBeforeAWriterCommitsLosesNothing(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	seed(t, db, "w", 1, time.Second)
	sch, c := newScheduler(t, db, fair.Config{})
	if got, err := sch.Claim(ctx, c, 10); err != nil || len(got) != 1 {
		t.Fatalf("claimed %d (%v), want 1", len(got), err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
VALUES (gen_random_uuid(), 'w', 'payee', 100, 'USD', now() - interval '1 second', now() - interval '1 second', 'w')`); err != nil {
		t.Fatal(err)
	}
	// The sweeper finds w drained (the new row is not committed) and
	// settles it a day ahead: nothing is due before then that it can see.
	// (The claim's own settle runs in the background and may hold w's
	// entry a moment: settle until it is moved.)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := c.SettleTenants(ctx, []string{"w"}); err != nil {
			t.Fatal(err)
		}
		var later bool
		if err := db.QueryRow(ctx, `SELECT coalesce(bool_and(next_at > now() + interval '12 hours'), true) FROM tenant_queue WHERE tenant = 'w'`).Scan(&later); err != nil {
			t.Fatal(err)
		}
		if later {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("w still due after settles found it drained")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := sch.Claim(ctx, c, 10)
	if err != nil || len(got) != 1 || got[0].Tenant != "w" {
		t.Fatalf("claimed %v (%v), want w's new row", count(got), err)
	}
}

// Writers racing sweepers on the same tenants: many goroutines create and
// re-pend rows of four tenants while three sweepers claim, settle and
// re-walk. Afterwards no PENDING row sits below its tenant's next due time
// in the queue (so none is unreachable), and every row was claimed once.
func TestWritersRacingSweepersLeaveNoRowUnreachable(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	tenants := []string{"r0", "r1", "r2", "r3"}
	const writers, each = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers+3)
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tn := tenants[(w+i)%len(tenants)]
				if _, err := db.Exec(ctx, `
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
SELECT gen_random_uuid(), $1, 'payee', 100, 'USD', now() - interval '1 second', now() - interval '1 second', $1
FROM generate_series(1, 1 + $2 % 3)`, tn, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var sweepers sync.WaitGroup
	for k := range 3 {
		sweepers.Add(1)
		go func() {
			defer sweepers.Done()
			sch, err := fair.New(fair.Config{Walk: 2}, db)
			if err != nil {
				errs <- err
				return
			}
			c := &store.Claimer{DB: db, Owner: fmt.Sprintf("sweeper-%d", k), Lease: time.Minute}
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := sch.Claim(ctx, c, 7)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, cl := range got {
					seen[cl.ID.String()]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	sweepers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// One more walk folds the last wakeups; then the queue must cover
	// every PENDING row.
	c := &store.Claimer{DB: db, Owner: "check", Lease: time.Minute}
	if _, err := c.DueTenants(ctx, store.TenantCursor{}, 10); err != nil {
		t.Fatal(err)
	}
	var below int
	if err := db.QueryRow(ctx, `
SELECT count(*) FROM (SELECT tenant, min(run_at) AS m FROM payments WHERE status = 'PENDING' GROUP BY tenant) p
LEFT JOIN tenant_queue q USING (tenant) WHERE q.next_at IS NULL OR q.next_at > p.m`).Scan(&below); err != nil {
		t.Fatal(err)
	}
	if below != 0 {
		t.Fatalf("%d tenants have PENDING rows the queue does not reach", below)
	}
	// And what is left is claimed, once.
	sch, c := newScheduler(t, db, fair.Config{})
	for {
		got, err := sch.Claim(ctx, c, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		for _, cl := range got {
			seen[cl.ID.String()]++
		}
	}
	var total int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s claimed %d times", id, n)
		}
	}
	if len(seen) != total {
		t.Fatalf("%d of %d payments claimed", len(seen), total)
	}
}

// heldSettles is the pool with the settles held until release is closed,
// and the fair claim statements that name a tenant "a..." counted.
type heldSettles struct {
	*pgxpool.Pool
	release chan struct{}
	claims  atomic.Int32
}

func (d *heldSettles) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, "paysched_settle_tenants") {
		<-d.release
	}
	return d.Pool.Exec(ctx, sql, args...)
}

func (d *heldSettles) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, "WITH share AS") && len(args) > 2 {
		if ts, ok := args[2].([]string); ok && slices.ContainsFunc(ts, func(t string) bool { return strings.HasPrefix(t, "a") }) {
			d.claims.Add(1) // a claim for one of the a's
		}
	}
	return d.Pool.Query(ctx, sql, args...)
}

// Tenants found short stay out of the windows until their settle has run,
// in the Claims after too: a Claim while the settles lag (after a spike of
// many small tenants) skips their windows and claims the backlog at once,
// instead of sharing rounds among tenants with nothing due.
func TestSettlingTenantsLeaveTheWindows(t *testing.T) {
	pool := pgtest.NewPool(t)
	db := &heldSettles{Pool: pool, release: make(chan struct{})}
	t.Cleanup(func() { close(db.release) })
	for i := 1; i <= 8; i++ {
		seed(t, pool, fmt.Sprintf("a%d", i), 1, 2*time.Second)
	}
	seed(t, pool, "z", 500, time.Second)
	sch, err := fair.New(fair.Config{Walk: 4}, db)
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Claimer{DB: db, Owner: "sweeper-" + t.Name(), Lease: time.Minute}
	got, err := sch.Claim(context.Background(), c, 100)
	if n := count(got); err != nil || len(got) != 100 || n["z"] != 92 {
		t.Fatalf("first claim: %v, %v", n, err)
	}
	// The a's are drained, and their settles have not run: they are still
	// in tenant_queue, due.
	db.claims.Store(0)
	got, err = sch.Claim(context.Background(), c, 100)
	if n := count(got); err != nil || n["z"] != 100 {
		t.Fatalf("second claim: %v, %v", n, err)
	}
	if n := db.claims.Load(); n != 0 {
		t.Fatalf("the second claim ran %d claim statements for the drained a's, want none", n)
	}
}

// A tenant awaiting its settle is passed by only while the claim fills
// from others: a row of its that falls due meanwhile (a release, a retry)
// is claimed by the next claim with room, settle or not.
func TestASettlingTenantsNewRowIsClaimed(t *testing.T) {
	pool := pgtest.NewPool(t)
	db := &heldSettles{Pool: pool, release: make(chan struct{})}
	t.Cleanup(func() { close(db.release) })
	seed(t, pool, "a1", 1, 2*time.Second)
	sch, err := fair.New(fair.Config{}, db)
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Claimer{DB: db, Owner: "sweeper-" + t.Name(), Lease: time.Minute}
	if got, err := sch.Claim(context.Background(), c, 10); err != nil || len(got) != 1 {
		t.Fatalf("first claim: %d, %v", len(got), err)
	}
	seed(t, pool, "a1", 1, time.Second) // its settle is held: a1 is still awaiting it
	if got, err := sch.Claim(context.Background(), c, 10); err != nil || len(got) != 1 {
		t.Fatalf("the new row of a tenant awaiting its settle: claimed %d, %v", len(got), err)
	}
}

// Past one window, a tenant at which the claim's rows ran out (it took
// what it was given, and has more) starts the next claim's window: it is
// not passed by for a whole cycle for the part it was not given. Here
// (windows of 2, claims of 5) c is given the 1 row a and b left; before,
// the cursor went past it and d took the whole second claim.
func TestTheCursorStaysOnATenantCutShort(t *testing.T) {
	db := pgtest.NewPool(t)
	for i, tn := range []string{"a", "b", "c", "d"} {
		seed(t, db, tn, 20, time.Duration(4-i)*time.Second)
	}
	sch, c := newScheduler(t, db, fair.Config{Walk: 2})
	total := map[string]int{}
	for k := range 2 {
		got, err := sch.Claim(context.Background(), c, 5)
		if err != nil || len(got) != 5 {
			t.Fatalf("claim %d: %d rows, %v", k+1, len(got), err)
		}
		if k == 0 {
			if n := count(got); n["a"] != 2 || n["b"] != 2 || n["c"] != 1 {
				t.Fatalf("first claim %v: want a 2, b 2 and c 1 (cut short)", n)
			}
		}
		for tn, n := range count(got) {
			total[tn] += n
		}
	}
	if total["c"] < 3 || total["d"] > 2 {
		t.Fatalf("two claims %v: c, cut short at the end of the first, must start the second (c 3, d 2)", total)
	}
}

// The peek spares a settle: a tenant short of its share because another
// sweeper holds its due rows (a claim in flight, here a transaction that
// locked them) is not drained, and is not handed to a settle, which would
// probe its partitions to find it due. When the rows come free it is
// still due, and the next claim takes them.
func TestThePeekSparesASettle(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	seed(t, db, "w", 4, time.Second)
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT id FROM payments WHERE tenant = 'w' ORDER BY id LIMIT 2 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	sch, c := newScheduler(t, db, fair.Config{})
	if got, err := sch.Claim(ctx, c, 10); err != nil || len(got) != 2 {
		t.Fatalf("claimed %d (%v), want the 2 rows not held", len(got), err)
	}
	if queued, spared := sch.Settles(); queued != 0 || spared != 1 {
		t.Fatalf("settles queued %d, spared %d: want 0 and 1 (w's other rows are held, not drained)", queued, spared)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := sch.Claim(ctx, c, 10); err != nil || len(got) != 2 {
		t.Fatalf("after the holder let go: claimed %d (%v), want w's 2 other rows", len(got), err)
	}
	if queued, _ := sch.Settles(); queued != 1 {
		t.Fatalf("settles queued %d, want 1 (w drained now)", queued)
	}
}

// The peek also says a tenant that took its whole share has nothing due
// after it: it is settled at once, where before the next claim had to
// walk it and find it empty first. The rows are due at today's midnight
// (the database's day) and the claimer's clock is that day's noon, so at
// any hour the rows are in the last partition the claim reaches.
func TestThePeekSeesAShareThatEmptiedItsTenant(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	var midnight time.Time
	if err := db.QueryRow(ctx, `
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
SELECT gen_random_uuid(), 'a1', 'payee', 100, 'USD', d, d, 'a1'
FROM (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS d) m, generate_series(1, 3)
RETURNING due_time`).Scan(&midnight); err != nil {
		t.Fatal(err)
	}
	sch, err := fair.New(fair.Config{}, db)
	if err != nil {
		t.Fatal(err)
	}
	c := &store.Claimer{DB: db, Owner: "sweeper-" + t.Name(), Lease: time.Minute,
		Now: func() time.Time { return midnight.Add(12 * time.Hour) }}
	if got, err := sch.Claim(ctx, c, 3); err != nil || len(got) != 3 {
		t.Fatalf("claimed %d (%v), want 3", len(got), err)
	}
	if queued, _ := sch.Settles(); queued != 1 {
		t.Fatalf("settles queued %d, want 1: a1 took its whole share and has nothing left", queued)
	}
}
