package fair_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
	sch, c := newScheduler(t, db, fair.Config{Walk: 3, WalkEvery: time.Nanosecond})
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
