// Command paybench is the API benchmark behind `make bench-api`: it drives a
// running payments-api with concurrent REST, gRPC and batch clients and
// prints payments/s and latency percentiles, ending with one `bench` line.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/tools/apibench"
	"github.com/paysched/paysched/tools/reconbench"
)

func main() {
	fs := flag.NewFlagSet("paybench", flag.ExitOnError)
	httpBase := fs.String("api-http", "http://127.0.0.1:8080", "payments-api REST base URL")
	grpcAddr := fs.String("api-grpc", "127.0.0.1:9090", "payments-api gRPC address")
	secret := fs.String("jwt-secret", auth.DevSecret, "HS256 secret to mint the bench token")
	conc := fs.Int("concurrency", 64, "concurrent clients for single creates")
	batchConc := fs.Int("batch-concurrency", 8, "concurrent clients for batchCreate")
	dur := fs.Duration("duration", 10*time.Second, "length of each phase")
	occurrences := fs.Bool("occurrences", false, "spike: the N payments are occurrences of N monthly recurring schedules, made by the planner")
	sdkPairs := fs.Int("sdk-pairs", 3, "api: alternated pairs of the raw REST client and the Go SDK (each pair two phases)")
	batch := fs.Int("batch-size", 1000, "items per batchCreate")
	mode := fs.String("mode", "api", "api: create throughput; fair: one big tenant (--n) and --small tenants of --per-small, all due in one second; spike: N payments due in one second, executed by the engine; steady: --rate payments due every second for --steady-for on the full stack; recon: reconcile a day of N attempts; webhooks: --n payments' notifications at --rate a second through a running webhook-dispatcher to 3 tenants' endpoints; console: seed N payments with COPY and time every console page")
	rate := fs.Int("rate", 1000, "steady: payments falling due per second")
	steadyFor := fs.Duration("steady-for", 120*time.Second, "steady: how long payments keep falling due")
	gwAddr := fs.String("gateway-addr", "127.0.0.1:9300", "steady: gateway-sim, for its double-charge report")
	runs := fs.Int("runs", 3, "recon: reconciliations of the seeded day")
	requests := fs.Int("requests", 200, "console: requests of each page")
	n := fs.Int("n", 200_000, "spike: payments")
	lead := fs.Duration("lead", 0, "spike: due time from now (default: measured: this machine's create rate on a sample, N at half of it, plus 5 s)")
	dbURL := fs.String("database-url", "", "spike: the schedule's database, to measure")
	auditURL := fs.String("audit-database-url", "", "spike: the audit log's database (empty: --database-url)")
	hooksURL := fs.String("webhooks-database-url", "", "webhooks: the webhooks' database (empty: --database-url)")
	pids := fs.String("pids", "", "spike: name=pid,... of the processes whose peak RSS and CPU to report (the run fails if one exits)")
	logs := fs.String("logs", "", "spike: name=path,... of their logs, quoted when one exits")
	timeout := fs.Duration("timeout", 15*time.Minute, "spike: give up after this")
	small := fs.Int("small", 100, "fair: small tenants (the big one has --n payments)")
	perSmall := fs.Int("per-small", 100, "fair: payments of each small tenant")
	later := fs.Int("later", 0, "fair: PENDING rows due an hour after the spike, seeded beside it (over 1,000 tenants of their own)")
	kafkaBrokers := fs.String("kafka-brokers", "", "spike: measure CDC lag and audit catch-up through these brokers")
	executed := fs.Bool("executed", false, "webhooks: schedule the --n payments through --api-grpc and let the engine execute them (else produce their notifications directly)")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "paybench:", err)
		os.Exit(2)
	}
	tok, err := auth.Mint([]byte(*secret), auth.DefaultIssuer, auth.DefaultAudience, "bench", false, time.Hour)
	if err != nil {
		os.Exit(fail(err))
	}
	cfg := apibench.Config{HTTPBase: *httpBase, GRPCAddr: *grpcAddr, Token: tok, Concurrency: *conc,
		Duration: *dur, BatchSize: *batch, RunID: fmt.Sprint(time.Now().UnixNano())}
	if *mode == "recon" {
		os.Exit(recon(*dbURL, *n, *runs))
	}
	if *mode == "console" {
		os.Exit(consoleRun(*dbURL, *n, *requests))
	}
	if *mode == "steady" {
		os.Exit(steady(cfg, *rate, *steadyFor, *dbURL, *gwAddr, *kafkaBrokers, *pids, *logs, *timeout))
	}
	if *mode == "fair" {
		os.Exit(fairRun(cfg, []byte(*secret), *n, *small, *perSmall, *later, *lead, *dbURL, *timeout))
	}
	if *mode == "webhooks" {
		api := ""
		if *executed {
			api = *grpcAddr
		}
		os.Exit(webhooksRun(*dbURL, *hooksURL, *kafkaBrokers, api, *pids, *n, *rate, *timeout))
	}
	if *mode == "spike" {
		os.Exit(spike(cfg, *n, *lead, *dbURL, *auditURL, *pids, *logs, *timeout, *kafkaBrokers, *occurrences))
	}
	if *sdkPairs < 1 {
		fmt.Fprintln(os.Stderr, "paybench: --sdk-pairs must be at least 1")
		os.Exit(2)
	}
	// The raw REST client and the Go SDK, alternated in pairs: the SDK's
	// figure is the median of its pairs' ratios (issue 45: at least 0.95).
	var rest, sdk apibench.Result
	var ratios []float64
	runID := cfg.RunID
	for pair := range *sdkPairs {
		// Each phase's keys are its own: a key sent again with another
		// body is a 409, not a create.
		cfg.RunID = fmt.Sprintf("%s-p%d", runID, pair)
		rest = apibench.REST(cfg)
		fmt.Println(rest)
		s, err := apibench.SDK(cfg)
		if err != nil {
			os.Exit(fail(err))
		}
		fmt.Println(s)
		sdk = s
		ratios = append(ratios, s.PerSecond()/rest.PerSecond())
	}
	sort.Float64s(ratios)
	sdkRatio := ratios[len(ratios)/2]
	grpcRes, err := apibench.GRPC(cfg)
	if err != nil {
		os.Exit(fail(err))
	}
	fmt.Println(grpcRes)
	batchRes, err := apibench.Batch(cfg, *batchConc)
	if err != nil {
		os.Exit(fail(err))
	}
	fmt.Println(batchRes)
	fmt.Printf("bench rest_creates_per_s=%.0f rest_p50_ms=%.2f rest_p99_ms=%.2f sdk_creates_per_s=%.0f sdk_vs_rest=%.3f (median of %d pairs, %.3f-%.3f) grpc_creates_per_s=%.0f grpc_p50_ms=%.2f grpc_p99_ms=%.2f batch_payments_per_s=%.0f errors=%d\n",
		rest.PerSecond(), ms(rest.P50), ms(rest.P99), sdk.PerSecond(), sdkRatio, len(ratios), ratios[0], ratios[len(ratios)-1],
		grpcRes.PerSecond(), ms(grpcRes.P50), ms(grpcRes.P99), batchRes.PerSecond(), rest.Errors+sdk.Errors+grpcRes.Errors+batchRes.Errors)
}

// withDB runs run on a pool of dbURL.
func withDB(dbURL string, run func(ctx context.Context, db *pgxpool.Pool) int) int {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	return run(ctx, db)
}

// fail reports err: the exit status of a run it ended.
func fail(err error) int {
	fmt.Fprintln(os.Stderr, "paybench:", err)
	return 1
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func spike(cfg apibench.Config, n int, lead time.Duration, dbURL, auditURL, pids, logs string, timeout time.Duration, brokers string, occurrences bool) int {
	sc := apibench.SpikeConfig{Config: cfg, N: n, Lead: lead, DatabaseURL: dbURL, AuditDatabaseURL: auditURL, Pids: parsePids(pids),
		Logs: namedList(logs), Timeout: timeout, Occurrences: occurrences}
	if brokers != "" {
		sc.KafkaBrokers = strings.Split(brokers, ",")
	}
	r, err := apibench.Spike(context.Background(), sc, func(s string) { fmt.Println(s) })
	if err != nil {
		return fail(err)
	}
	fmt.Printf("payments=%d completed=%d failed=%d dead_lettered=%d other=%d\n", r.N, r.Completed, r.Failed, r.Dead, r.Others)
	fmt.Printf("executed/s=%.0f drain=%.1fs lateness p50=%.2fs p99=%.2fs max=%.2fs\n", r.ExecutedPerS, r.DrainS, r.LatP50, r.LatP99, r.LatMax)
	names := make([]string, 0, len(r.RSSMB))
	for k := range r.RSSMB {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("peak RSS %-14s %4d MB\n", k, r.RSSMB[k])
	}
	cpuNames := make([]string, 0, len(r.CPUus))
	total := 0.0
	for k, v := range r.CPUus {
		if strings.HasPrefix(k, apibench.PGPart) || k == apibench.BenchPG {
			continue // a part of postgres's, or the benchmark's own
		}
		cpuNames = append(cpuNames, k)
		total += v
	}
	sort.Strings(cpuNames)
	for _, k := range cpuNames {
		fmt.Printf("cpu per payment %-14s %7.1f µs\n", k, r.CPUus[k])
		if k == "postgres" {
			fmt.Print(apibench.PGParts(r.CPUus))
		}
	}
	fmt.Printf("cpu per payment %-14s %7.1f µs\n", "total", total)
	fmt.Printf("cpu per payment %-14s %7.1f µs (the benchmark's own queries in Postgres: not in the total)\n", "bench queries", r.CPUus[apibench.BenchPG])
	if len(r.CatchupCPUus) > 0 {
		names := make([]string, 0, len(r.CatchupCPUus))
		for k := range r.CatchupCPUus {
			if !strings.HasPrefix(k, apibench.PGPart) && k != apibench.BenchPG {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		catchup := 0.0
		for _, k := range names {
			fmt.Printf("audit catch-up cpu per payment %-14s %7.1f µs\n", k, r.CatchupCPUus[k])
			catchup += r.CatchupCPUus[k]
			if k == "postgres" {
				fmt.Print(strings.ReplaceAll(apibench.PGParts(r.CatchupCPUus), "cpu per payment", "audit catch-up cpu per payment"))
			}
		}
		fmt.Printf("audit catch-up cpu per payment %-14s %7.1f µs\n", "total", catchup)
	}
	fmt.Printf("wal per payment %7.0f bytes, %.1f records (the whole cluster; from %s to %s)\n", r.WALBytes, r.WALRecords, r.WALRange[0], r.WALRange[1])
	fmt.Println(r.Account)
	last := fmt.Sprintf("bench executed_per_s=%.0f lateness_p50_s=%.2f lateness_p99_s=%.2f lateness_max_s=%.2f drain_s=%.1f max_rss_mb=%d %s",
		r.ExecutedPerS, r.LatP50, r.LatP99, r.LatMax, r.DrainS, r.MaxRSSMB, r.Account.Fields())
	if r.CDC {
		fmt.Printf("cdc lag (commit -> event readable on Kafka) p50=%.2fs p99=%.2fs; audit log caught up %.1fs after the last execution\n",
			r.CDCLagP50, r.CDCLagP99, r.AuditCatchupS)
		last += fmt.Sprintf(" cdc_lag_p99_s=%.2f audit_catchup_s=%.1f", r.CDCLagP99, r.AuditCatchupS)
	}
	fmt.Println(last)
	return 0
}

func recon(dbURL string, n, runs int) int {
	return withDB(dbURL, func(ctx context.Context, db *pgxpool.Pool) int {
		res, err := reconbench.Run(ctx, db, n, runs, os.Stdout)
		if err != nil {
			return fail(err)
		}
		med := reconbench.Median(res)
		last := res[len(res)-1].Run
		fmt.Printf("bench recon_attempts=%d recon_seconds=%.2f rows_per_s=%.0f repaired_first_run=%d mismatches=%d\n",
			n, med.Seconds(), float64(last.Charges)/med.Seconds(), res[0].Run.Repaired, last.Mismatches)
		return 0
	})
}

// namedList parses name=value,... into a map.
func namedList(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if name, v, ok := strings.Cut(kv, "="); ok {
			out[name] = v
		}
	}
	return out
}

func steady(cfg apibench.Config, rate int, d time.Duration, dbURL, gwAddr, brokers, pids, logs string, timeout time.Duration) int {
	if rate <= 0 || d < time.Second || dbURL == "" {
		fmt.Fprintln(os.Stderr, "paybench: steady needs --rate > 0, --steady-for >= 1s and --database-url (and --kafka-brokers to watch the events)")
		return 2
	}
	var seeds []string
	if brokers != "" {
		seeds = strings.Split(brokers, ",")
	}
	procs := parsePids(pids)
	cfg.BatchSize = 1000
	r, err := apibench.Steady(context.Background(), apibench.SteadyConfig{Config: cfg, Rate: rate, Duration: d, DatabaseURL: dbURL,
		GatewayAddr: gwAddr, KafkaBrokers: seeds, Pids: procs, Logs: namedList(logs), Timeout: timeout},
		func(s string) { fmt.Println(s) })
	if err != nil {
		return fail(err)
	}
	fmt.Printf("payments=%d completed=%d failed=%d dead_lettered=%d\n", r.N, r.Completed, r.Failed, r.Dead)
	fmt.Println(r.CPU())
	fmt.Println(r.Hops())
	fmt.Println(r)
	return 0
}

func fairRun(cfg apibench.Config, secret []byte, n, small, perSmall, later int, lead time.Duration, dbURL string, timeout time.Duration) int {
	mint := func(tenant string) (string, error) {
		return auth.MintFor(secret, auth.DefaultIssuer, auth.DefaultAudience, "bench", tenant, false, time.Hour)
	}
	r, err := apibench.Fair(context.Background(), apibench.FairConfig{Config: cfg, Big: n, Small: small, PerSmall: perSmall,
		Later: later, Mint: mint, DatabaseURL: dbURL, Lead: lead, Timeout: timeout}, func(s string) { fmt.Println(s) })
	if err != nil {
		return fail(err)
	}
	fmt.Printf("small tenants' lateness p50=%.2fs p99=%.2fs; the first attempt of all started %.2fs after the due time\n",
		r.SmallLatP50, r.SmallLatP99, r.FirstStartS)
	fmt.Printf("fairrun executed_per_s=%.0f small_lateness_p99_s=%.2f big_drain_s=%.1f weight2_share=%.2f tenant_first_max_s=%.2f completed=%d other=%d\n",
		r.ExecutedPerS, r.SmallLatP99, r.BigDrainS, r.WeightedShare, r.TenantFirstMaxS, r.Completed, r.Others)
	return 0
}

// parsePids reads --pids (name=pid,...).
func parsePids(pids string) map[string]int {
	procs := map[string]int{}
	for name, v := range namedList(pids) {
		if p, err := strconv.Atoi(v); err == nil {
			procs[name] = p
		}
	}
	return procs
}
