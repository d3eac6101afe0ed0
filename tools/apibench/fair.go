package apibench

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/store"
)

// FairConfig describes the fairness benchmark: one big tenant and many
// small ones, all due in the same second.
type FairConfig struct {
	Config
	Big, Small, PerSmall int
	// Later seeds this many PENDING rows due later (two hours on, over
	// 1,000 tenants of their own) beside the spike, straight into the
	// database: the walk and the idle polls must not pay for them.
	Later int
	// Mint returns a token whose tenant claim is tenant.
	Mint        func(tenant string) (string, error)
	DatabaseURL string
	Lead        time.Duration
	Timeout     time.Duration
}

// FairResult is what the fairness benchmark measured.
type FairResult struct {
	ExecutedPerS float64
	SmallLatP50  float64
	SmallLatP99  float64
	// FirstStartS is when the first attempt of all started, after the due
	// time: the part of every lateness that no share can change.
	FirstStartS float64
	// TenantFirstMaxS is the latest of the small tenants' first attempts,
	// after the due time: how long the last tenant reached waited.
	TenantFirstMaxS   float64
	BigDrainS         float64
	WeightedShare     float64 // the weight-2 tenant's share per weight-1 tenant's, while both were backlogged
	Completed, Others int
}

// weighted is the small tenant an operator gives weight 2.
const weighted = "small-000"

// Fair schedules cfg.Big payments of tenant "big" and cfg.PerSmall of each
// of cfg.Small tenants ("small-000" has weight 2), all due in one second,
// waits until every one is executed, and measures the small tenants'
// lateness, the big one's drain and the weighted tenant's share.
func Fair(ctx context.Context, cfg FairConfig, progress func(string)) (FairResult, error) {
	db, err := svc.Pool(ctx, cfg.DatabaseURL, 4, svc.CustomPlans)
	if err != nil {
		return FairResult{}, err
	}
	defer db.Close()
	if err := store.SetTenantLimits(ctx, db, store.TenantLimits{Tenant: weighted, Weight: 2, UpdatedBy: "bench-fair"}); err != nil {
		return FairResult{}, err
	}
	if cfg.Later > 0 {
		// Two hours on, after the spike whatever its lead. Rows a superuser
		// writes skip the API's guard, not the tenant queue's wakeups: the
		// sweepers see them as any others.
		if _, err := db.Exec(ctx, `
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
SELECT gen_random_uuid(), 'later', 'payee', 100, 'USD', $2::timestamptz + (i % 3600) * interval '1 second',
       $2::timestamptz + (i % 3600) * interval '1 second', 'later-' || lpad((i % 1000)::text, 4, '0')
FROM generate_series(1, $1) i`, cfg.Later, time.Now().Add(2*time.Hour)); err != nil {
			return FairResult{}, fmt.Errorf("seed later rows: %w", err)
		}
	}
	n := cfg.Big + cfg.Small*cfg.PerSmall
	if cfg.Lead == 0 {
		// As make bench's spike: the creates' own work (WAL, checkpoint,
		// autovacuum's analyze) settles before the due time alike, so the
		// two runs' executed/s compare.
		lead, err := calibrate(ctx, cfg.Config, cfg.DatabaseURL, n, progress)
		if err != nil {
			return FairResult{}, err
		}
		cfg.Lead = lead
	}
	due := time.Now().Add(cfg.Lead).Truncate(time.Second)
	item := func(tenant string) func(i int) *payschedv1.CreateScheduledPaymentRequest {
		return func(i int) *payschedv1.CreateScheduledPaymentRequest {
			return &payschedv1.CreateScheduledPaymentRequest{Payee: fmt.Sprint("payee-", i), Amount: int64(100 + i%1000),
				Currency: "USD", DueAt: timestamppb.New(due), RequestId: fmt.Sprintf("%s-%s-%d", cfg.RunID, tenant, i)}
		}
	}
	sched := func(tenant string, k int) error {
		tok, err := cfg.Mint(tenant)
		if err != nil {
			return err
		}
		c := cfg.Config
		c.Token = tok
		return schedule(ctx, c, k, 8, item(tenant))
	}
	// The big one first: in due order (run_at, then insertion) the small
	// ones would wait behind its whole backlog.
	if err := sched("big", cfg.Big); err != nil {
		return FairResult{}, err
	}
	smalls := make([]string, cfg.Small)
	for i := range smalls {
		smalls[i] = fmt.Sprintf("small-%03d", i)
	}
	if err := scheduleTenants(ctx, cfg.Config, smalls, cfg.PerSmall, cfg.Mint, item); err != nil {
		return FairResult{}, err
	}
	if time.Now().After(due) {
		return FairResult{}, fmt.Errorf("scheduling took longer than the lead (%s): raise --lead", cfg.Lead)
	}
	progress(fmt.Sprintf("scheduled %d payments (big %d, %d tenants of %d) due at %s (in %.1fs)",
		n, cfg.Big, cfg.Small, cfg.PerSmall, due.Format(time.RFC3339), time.Until(due).Seconds()))
	time.Sleep(time.Until(due))
	deadline := time.Now().Add(cfg.Timeout)
	for {
		left, err := anyOpen(ctx, db, due.Add(time.Hour))
		if err != nil {
			return FairResult{}, err
		}
		if !left {
			progress(fmt.Sprintf("t+%5.1fs open=0", time.Since(due).Seconds()))
			break
		}
		if time.Now().After(deadline) {
			return FairResult{}, fmt.Errorf("payments still open after %s", cfg.Timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
	var r FairResult
	err = db.QueryRow(ctx, `
		WITH first AS (
			SELECT p.tenant, p.due_time, min(a.started_at) AS started, max(a.finished_at) AS finished
			FROM payments p JOIN payment_attempts a ON a.payment_id = p.id GROUP BY p.id, p.tenant, p.due_time)
		SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(epoch FROM started - due_time))
		                FILTER (WHERE tenant <> 'big'), 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY EXTRACT(epoch FROM started - due_time))
		                FILTER (WHERE tenant <> 'big'), 0),
		       coalesce(EXTRACT(epoch FROM max(finished) FILTER (WHERE tenant = 'big') - min(due_time)), 0),
		       EXTRACT(epoch FROM min(started) - min(due_time)),
		       coalesce((SELECT max(s) FROM (SELECT EXTRACT(epoch FROM min(started) - min(due_time)) AS s
		                 FROM first WHERE tenant LIKE 'small-%' GROUP BY tenant) x), 0)
		FROM first`).Scan(&r.SmallLatP50, &r.SmallLatP99, &r.BigDrainS, &r.FirstStartS, &r.TenantFirstMaxS)
	if err != nil {
		return r, fmt.Errorf("measure: %w", err)
	}
	var drain float64
	if err := db.QueryRow(ctx, `SELECT EXTRACT(epoch FROM max(finished_at) - $1::timestamptz) FROM payment_attempts`, due).Scan(&drain); err != nil {
		return r, err
	}
	r.ExecutedPerS = float64(n) / drain
	// The share while both were backlogged. Each small tenant's payments
	// start spread over the time it is backlogged, so their mean start
	// (from the first start of all) is half its drain; a tenant with twice
	// the share drains in half the time. The ratio of the means (weight-1
	// tenants' over the weight-2 tenant's) is the share ratio, averaged
	// over every payment: the start of one payment, or the order within a
	// batch and between executors, moves it little.
	err = db.QueryRow(ctx, `
		WITH first AS (
			SELECT p.tenant, min(a.started_at) AS started
			FROM payments p JOIN payment_attempts a ON a.payment_id = p.id
			GROUP BY p.id, p.tenant),
		t0 AS (SELECT min(started) AS t0 FROM first)
		SELECT coalesce(avg(EXTRACT(epoch FROM started - t0)) FILTER (WHERE tenant LIKE 'small-%' AND tenant <> $1)
		       / nullif(avg(EXTRACT(epoch FROM started - t0)) FILTER (WHERE tenant = $1), 0), 0)::float8
		FROM first, t0`, weighted).Scan(&r.WeightedShare)
	if err != nil {
		return r, err
	}
	err = db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = $1), count(*) FILTER (WHERE status <> $1) FROM payments
		WHERE tenant NOT LIKE 'later-%'`,
		string(payment.Completed)).Scan(&r.Completed, &r.Others)
	return r, err
}

// scheduleTenants creates per payments for each tenant, each tenant's in
// one batch under its own token, over one pool of connections: 10,000
// tenants are 10,000 calls, not 10,000 dials.
func scheduleTenants(ctx context.Context, cfg Config, tenants []string, per int, mint func(string) (string, error),
	item func(tenant string) func(i int) *payschedv1.CreateScheduledPaymentRequest) error {
	if len(tenants) == 0 || per == 0 {
		return nil
	}
	clients, closeAll, err := dialPool(cfg, 4)
	if err != nil {
		return err
	}
	defer closeAll()
	sem := make(chan struct{}, 16)
	errc := make(chan error, len(tenants))
	for k, tn := range tenants {
		tok, err := mint(tn)
		if err != nil {
			return err
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
			mk := item(tn)
			for start := 0; start < per; start += cfg.BatchSize {
				items := make([]*payschedv1.CreateScheduledPaymentRequest, min(cfg.BatchSize, per-start))
				for j := range items {
					items[j] = mk(start + j)
				}
				if _, err := clients[k%len(clients)].BatchCreateScheduledPayments(actx,
					&payschedv1.BatchCreateScheduledPaymentsRequest{Items: items}); err != nil {
					errc <- fmt.Errorf("schedule tenant %s: %w", tn, err)
					return
				}
			}
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	close(errc)
	return <-errc
}
