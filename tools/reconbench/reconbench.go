// Package reconbench is `make bench-recon`: it seeds one UTC day holding N
// executed payments (N attempts, N settled charges in an in-memory
// gateway-sim, with a planted mismatch of every kind), then times the
// reconciliation of that day.
package reconbench

import (
	"context"
	"crypto/md5"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/tools/gatewaysim"
)

// Payment i's id: md5("bench-<i>") read as a UUID, the same in SQL and Go.
func paymentID(i int) uuid.UUID {
	return uuid.UUID(md5.Sum([]byte(fmt.Sprintf("bench-%d", i))))
}

// Planted mismatches, by i modulo 1,000 (0.4% of the day).
const (
	plantMissing   = 1 // COMPLETED, no charge: MISSING_AT_GATEWAY
	plantRepair    = 2 // DEAD_LETTERED, charged: REPAIRED
	plantAmount    = 3 // charged another amount: AMOUNT_MISMATCH
	plantDuplicate = 4 // a second charge under another key: DUPLICATE_CHARGE
)

// seedSQL writes the day in a few set-based statements: payment_index,
// payments (COMPLETED, or DEAD_LETTERED for the planted repairs) and one
// SUCCEEDED attempt each, spread over the day.
const seedSQL = `
WITH s AS (
    SELECT i, md5('bench-' || i)::uuid AS id, $1::timestamptz + (i % 86000) * interval '1 second' AS due
    FROM generate_series(0, $2 - 1) AS i
), idx AS (
    INSERT INTO payment_index (id, payer, due_time, created_at) SELECT id, 'bench', due, due FROM s
), pay AS (
    INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status, attempt,
                          dead_letter_reason, gateway_ref, created_at, updated_at)
    SELECT id, 'bench', 'merchant-' || (i % 500), 100 + i % 10000, 'USD', due, due,
           CASE WHEN i % 1000 = 2 THEN $3 ELSE $4 END, 1,
           CASE WHEN i % 1000 = 2 THEN $5 END,
           CASE WHEN i % 1000 = 2 THEN NULL ELSE 'ch_' || i END,
           due - interval '1 day', due + interval '1 second'
    FROM s
)
INSERT INTO payment_attempts (payment_id, attempt, started_at, finished_at, gateway_key, outcome, gateway_ref, executor_id)
SELECT id, 1, due, due + interval '1 second', id::text,
       CASE WHEN i % 1000 = 2 THEN $6 ELSE $7 END,
       CASE WHEN i % 1000 = 2 THEN NULL ELSE 'ch_' || i END, 'bench'
FROM s`

// Result is one timed reconciliation.
type Result struct {
	Run     *reconcile.Run
	Elapsed time.Duration
}

// Seed writes n payments and attempts into db for day and returns a ledger
// holding their charges.
func Seed(ctx context.Context, db *pgxpool.Pool, day time.Time, n int) (*gatewaysim.MemLedger, error) {
	if _, err := db.Exec(ctx, seedSQL, day, n, string(payment.DeadLettered), string(payment.Completed),
		string(payment.AmbiguousUnresolved), string(payment.Ambiguous), string(payment.Succeeded)); err != nil {
		return nil, fmt.Errorf("seed payments: %w", err)
	}
	if _, err := db.Exec(ctx, `ANALYZE payments; ANALYZE payment_index; ANALYZE payment_attempts`); err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	ledger := gatewaysim.NewMemLedger()
	for i := range n {
		if i%1000 == plantMissing {
			continue
		}
		id := paymentID(i).String()
		amount := int64(100 + i%10000)
		if i%1000 == plantAmount {
			amount++
		}
		at := day.Add(time.Duration(i%86000)*time.Second + time.Second/2)
		c := &gatewaysim.Charge{ID: fmt.Sprintf("ch_%d", i), Key: id, Reference: id, Amount: amount, Currency: "USD",
			Payer: "bench", Payee: fmt.Sprintf("merchant-%d", i%500), CreatedAt: at}
		if _, _, err := ledger.Record(ctx, c); err != nil {
			return nil, err
		}
		if i%1000 == plantDuplicate {
			dup := *c
			dup.ID, dup.Key = c.ID+"_dup", "dup-"+id
			if _, _, err := ledger.Record(ctx, &dup); err != nil {
				return nil, err
			}
		}
	}
	return ledger, nil
}

// Serve runs an in-memory gateway-sim over ledger and returns its client.
func Serve(ledger *gatewaysim.MemLedger) (gatewayv1.GatewayServiceClient, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, gatewaysim.New(ledger, nil))
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		gs.Stop()
		return nil, nil, err
	}
	return gatewayv1.NewGatewayServiceClient(cc), func() { cc.Close(); gs.Stop() }, nil
}

// Run seeds n payments for yesterday into db and reconciles the day runs
// times, printing each run to out; it returns the results.
func Run(ctx context.Context, db *pgxpool.Pool, n, runs int, out io.Writer) ([]Result, error) {
	day := reconcile.Day(time.Now()).AddDate(0, 0, -1)
	t0 := time.Now()
	ledger, err := Seed(ctx, db, day, n)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "seeded %d payments, %d attempts and their charges for %s in %.1fs\n", n, n, day.Format(time.DateOnly), time.Since(t0).Seconds())
	gw, stop, err := Serve(ledger)
	if err != nil {
		return nil, err
	}
	defer stop()
	r := &reconcile.Runner{DB: db, Gateway: gateway.FromClient(gw), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var res []Result
	for i := range runs {
		start := time.Now()
		run, err := r.Run(ctx, day, "bench")
		if err != nil {
			return nil, err
		}
		el := time.Since(start)
		res = append(res, Result{Run: run, Elapsed: el})
		fmt.Fprintf(out, "run %d: %.2fs charges=%d payments=%d repaired=%d mismatches=%d rows_per_s=%.0f\n",
			i+1, el.Seconds(), run.Charges, run.Payments, run.Repaired, run.Mismatches, float64(run.Charges)/el.Seconds())
	}
	return res, nil
}

// Median is the median elapsed time of results.
func Median(res []Result) time.Duration {
	ds := make([]time.Duration, len(res))
	for i, r := range res {
		ds[i] = r.Elapsed
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2]
}
