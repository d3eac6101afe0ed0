package apibench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/svc"
)

// SteadyConfig describes the steady-load benchmark: Rate payments fall due
// every second for Duration, on the full stack.
type SteadyConfig struct {
	Config
	Rate         int
	Duration     time.Duration
	DatabaseURL  string
	GatewayAddr  string
	KafkaBrokers []string
	Pids         map[string]int
	Logs         map[string]string
	Timeout      time.Duration
}

// SteadyResult is what the steady load measured.
type SteadyResult struct {
	Rate, N                int
	LatP50, LatP99         float64 // first attempt start - due, seconds
	CDCLagP99ms, NoteP99ms float64
	// The notification's hops, p50 and p99 in ms: commit → the change
	// readable on Kafka (cdc), then → the notification readable (the
	// audit-consumer: its audit row committed, the note produced).
	CDCLagP50ms, NoteP50ms     float64
	ConsumeP50ms, ConsumeP99ms float64
	// ChangeBytes is a change event's mean size on the payments topic
	// (key, value and headers); NoteBytes a notification's.
	ChangeBytes, NoteBytes float64
	// CPUus is each process's CPU (and Postgres's, all its processes) from
	// the first due time to the drain, in µs per payment.
	CPUus map[string]float64
	// Account is the same span's CPU per payment in its three parts.
	Account Account
	// WALRecords and WALBytes are the cluster's WAL per payment over the
	// same span (pg_stat_wal): the walsender reads every record of the
	// cluster, whichever database wrote it.
	WALRecords, WALBytes float64
	// WatcherUs is this benchmark's own CPU per payment over the same
	// span (its Kafka watchers, its drain probe): shown beside the
	// product's, never in its total.
	WatcherUs               float64
	DoubleCharged           int
	Completed, Failed, Dead int
}

func (r SteadyResult) String() string {
	return fmt.Sprintf("steady rate=%d payments=%d lateness_p50_s=%.3f lateness_p99_s=%.3f cdc_lag_p99_ms=%.0f notify_p99_ms=%.0f double_charged=%d %s",
		r.Rate, r.N, r.LatP50, r.LatP99, r.CDCLagP99ms, r.NoteP99ms, r.DoubleCharged, r.Account.Fields())
}

// CPU lists the CPU per payment by process, largest first.
func (r SteadyResult) CPU() string {
	names := make([]string, 0, len(r.CPUus))
	total := 0.0
	for name, us := range r.CPUus {
		if strings.HasPrefix(name, PGPart) || name == BenchPG {
			continue
		}
		names = append(names, name)
		total += us
	}
	sort.Slice(names, func(i, j int) bool { return r.CPUus[names[i]] > r.CPUus[names[j]] })
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "cpu per payment %-15s %6.1f µs\n", name, r.CPUus[name])
		if name == "postgres" {
			b.WriteString(PGParts(r.CPUus))
		}
	}
	fmt.Fprintf(&b, "cpu per payment %-15s %6.1f µs\n", "total", total)
	fmt.Fprintf(&b, "cpu per payment %-15s %6.1f µs, its queries in Postgres %.1f µs (the benchmark itself: not in the total)\n", "bench watcher", r.WatcherUs, r.CPUus[BenchPG])
	fmt.Fprintf(&b, "wal per payment %.1f records, %.0f bytes (the whole cluster)\n", r.WALRecords, r.WALBytes)
	b.WriteString(r.Account.String())
	return b.String()
}

// PGParts lists Postgres's CPU by kind of process (cpu names under
// PGPart), largest first, indented under the total.
func PGParts(cpu map[string]float64) string {
	var parts []string
	for name := range cpu {
		if strings.HasPrefix(name, PGPart) {
			parts = append(parts, name)
		}
	}
	sort.Slice(parts, func(i, j int) bool { return cpu[parts[i]] > cpu[parts[j]] })
	var b strings.Builder
	for _, name := range parts {
		fmt.Fprintf(&b, "cpu per payment   %-24s %6.1f µs\n", strings.TrimPrefix(name, PGPart), cpu[name])
	}
	return b.String()
}

// Hops are what the steady run prints beside its last line.
func (r SteadyResult) Hops() string {
	return fmt.Sprintf("hops (ms, p50/p99): commit -> change on Kafka %.0f/%.0f; change on Kafka -> notification %.0f/%.0f; commit -> notification %.0f/%.0f\n"+
		"bytes per event on the wire: change %.0f, notification %.0f",
		r.CDCLagP50ms, r.CDCLagP99ms, r.ConsumeP50ms, r.ConsumeP99ms, r.NoteP50ms, r.NoteP99ms, r.ChangeBytes, r.NoteBytes)
}

// lagWatch records, per event, how long after its commit it was read, and
// the events' bytes.
type lagWatch struct {
	*topicTail
	mu    sync.Mutex
	lags  []float64 // ms
	at    []time.Time
	bytes int64
}

func (w *lagWatch) add(ms float64, rec *kgo.Record) {
	n := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value)
	}
	w.mu.Lock()
	w.lags = append(w.lags, ms)
	w.at = append(w.at, time.Now())
	w.bytes += int64(n)
	w.mu.Unlock()
}

// windows returns the lag's p99 in each 10 s window from t0: where in the
// run a tail comes from.
func (w *lagWatch) windows(t0 time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	byWindow := map[int][]float64{}
	last := 0
	for i, at := range w.at {
		k := max(0, int(at.Sub(t0)/(10*time.Second)))
		byWindow[k] = append(byWindow[k], w.lags[i])
		last = max(last, k)
	}
	var b strings.Builder
	for k := 0; k <= last; k++ {
		_, p99, _ := percentiles(byWindow[k], 0)
		fmt.Fprintf(&b, " %.0f", p99)
	}
	return b.String()
}

// percentiles returns p50 and p99 and the mean bytes per event.
func (w *lagWatch) percentiles() (p50, p99, bytes float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return percentiles(w.lags, w.bytes)
}

func percentiles(v []float64, bytes int64) (p50, p99, mean float64) {
	if len(v) == 0 {
		return -1, -1, 0
	}
	sort.Float64s(v)
	return v[len(v)/2], v[min(len(v)-1, len(v)*99/100)], float64(bytes) / float64(len(v))
}

// walStats reads the cluster's WAL records and bytes written so far.
func walStats(ctx context.Context, db *pgxpool.Pool) ([2]int64, error) {
	var w [2]int64
	if err := db.QueryRow(ctx, `SELECT wal_records, wal_bytes::bigint FROM pg_stat_wal`).Scan(&w[0], &w[1]); err != nil {
		return w, fmt.Errorf("pg_stat_wal: %w", err)
	}
	return w, nil
}

// anyOpen reports whether a payment due by until is still PENDING or
// claimed: two index probes, where counting them reads every open row.
func anyOpen(ctx context.Context, db *pgxpool.Pool, until time.Time) (bool, error) {
	var open bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payments WHERE status = $1 AND due_time <= $3)
		OR EXISTS (SELECT 1 FROM payments WHERE lease_until IS NOT NULL AND status = $2 AND due_time <= $3)`,
		string(payment.Pending), string(payment.Processing), until).Scan(&open)
	return open, err
}

// hopKey names a change by payment and status: a terminal notification
// and the change it announces share it.
func hopKey(id, status string) string { return id + "|" + status }

// Steady schedules Rate payments due every second over Duration (created
// ahead), then watches them execute under the stack's faults, measuring
// lateness, CDC lag (commit to readable on Kafka) and notification lag
// (commit of the change to the CloudEvent readable on Kafka).
func Steady(ctx context.Context, cfg SteadyConfig, progress func(string)) (SteadyResult, error) {
	dog := watch(cfg.Pids, cfg.Logs)
	defer dog.close()
	n := cfg.Rate * int(cfg.Duration/time.Second)
	r := SteadyResult{Rate: cfg.Rate, N: n}
	// Created ahead, at half the measured create rate: the load measured
	// is the execution, and a slow machine only waits longer.
	lead, err := calibrate(ctx, cfg.Config, cfg.DatabaseURL, n, progress)
	if err != nil {
		return r, err
	}
	t0 := time.Now().Add(lead).Truncate(time.Second)
	step := time.Second / time.Duration(cfg.Rate)
	err = schedule(ctx, cfg.Config, n, 4, func(i int) *payschedv1.CreateScheduledPaymentRequest {
		return &payschedv1.CreateScheduledPaymentRequest{Payee: fmt.Sprint("payee-", i), Amount: int64(100 + i%1000),
			Currency: "USD", DueAt: timestamppb.New(t0.Add(time.Duration(i) * step)), RequestId: fmt.Sprintf("%s-st-%d", cfg.RunID, i)}
	})
	if err != nil {
		return r, err
	}
	if time.Now().After(t0) {
		return r, fmt.Errorf("scheduling took longer than the lead (%s)", lead)
	}
	progress(fmt.Sprintf("scheduled %d payments due %d/s from %s for %s", n, cfg.Rate, t0.Format(time.RFC3339), cfg.Duration))
	cdc, notes := &lagWatch{}, &lagWatch{}
	// When each terminal change became readable, for the second hop.
	var seenMu sync.Mutex
	seen := map[string]time.Time{}
	var consume []float64
	if len(cfg.KafkaBrokers) > 0 { // else the engine alone (CDC=0): no events to watch
		// Both watchers read partition 0 only, as the spike's does: keys spread
		// payments evenly over partitions and each is written in commit order,
		// so a partition is a fair sample, for a fraction of the watcher's load
		// on the machine it measures (reading every change decoded ~3 changes
		// per payment at 5,000/s in this process).
		cdc.topicTail, err = tailTopic(ctx, cfg.KafkaBrokers, kafka.DefaultTopics.Payments, []int32{0}, func(rec *kgo.Record, now time.Time) {
			// Only changes committed from the first due time on: the creates
			// before it are the setup, and their backlog's tail, still being
			// streamed when the watch starts, is not the steady load.
			if ts, ok := envelope.SourceTsMs(rec.Value); ok && ts >= t0.UnixMilli() {
				cdc.add(float64(now.UnixMilli()-ts), rec)
			}
			if e, err := envelope.Parse(rec.Value); err == nil && e.After() != nil {
				id, st := envelope.StringOf(e.After().ID), envelope.StringOf(e.After().Status)
				if id != nil && st != nil && payment.Status(*st).AtRest() {
					seenMu.Lock()
					seen[hopKey(*id, *st)] = now
					seenMu.Unlock()
				}
			}
		})
		if err != nil {
			return r, err
		}
		defer cdc.stop()
		notes.topicTail, err = tailTopic(ctx, cfg.KafkaBrokers, kafka.DefaultTopics.Notifications, []int32{0}, func(rec *kgo.Record, now time.Time) {
			n, ok := notification.Decode(rec)
			if !ok {
				return
			}
			if !n.Time.Before(t0) {
				notes.add(float64(now.Sub(n.Time).Microseconds())/1000, rec)
			}
			st, ok := strings.CutPrefix(n.Type, notification.TypePrefix)
			if !ok || st == "created" {
				return
			}
			seenMu.Lock()
			// The change is read first but by another consumer: a note
			// seen before its change (rare) is left out.
			if at, ok := seen[hopKey(string(rec.Key), strings.ToUpper(st))]; ok {
				consume = append(consume, float64(now.Sub(at).Microseconds())/1000)
			}
			seenMu.Unlock()
		})
		if err != nil {
			return r, err
		}
		defer notes.stop()
	}
	// Planned as the services plan (svc.CustomPlans): a generic plan of the
	// drain check locked a year of partitions every poll, during the spike.
	db, err := svc.Pool(ctx, cfg.DatabaseURL, 4, svc.CustomPlans)
	if err != nil {
		return r, err
	}
	defer db.Close()
	deadline := t0.Add(cfg.Duration).Add(cfg.Timeout)
	time.Sleep(time.Until(t0))
	walStart, err := walStats(ctx, db)
	if err != nil {
		return r, err
	}
	cpu := newCPUMeter(cfg.Pids, pgLabels(ctx, db))
	acct := startAccount()
	self := os.Getpid()
	selfStart, _ := cpuTime(self)
	// Whether anything is open is two index probes; how much is open reads
	// every open row (~0.9 s of a database core at 600,000), so it is
	// counted for the progress lines only now and then: polled every 5 s,
	// the count took a sixth of the database's time in the run it measured.
	last := t0.Add(cfg.Duration).Add(time.Hour)
	var counted time.Time
	var countTook time.Duration
	for {
		if err := dog.failed(); err != nil {
			return r, err
		}
		left, err := anyOpen(ctx, db, last)
		if err != nil {
			return r, err
		}
		if !left {
			r.CPUus = map[string]float64{}
			used := cpu.since()
			for name, d := range used {
				r.CPUus[name] = float64(d.Microseconds()) / float64(n)
			}
			r.Account = acct.finish(used, n, "payment")
			if selfNow, ok := cpuTime(self); ok {
				r.WatcherUs = float64((selfNow - selfStart).Microseconds()) / float64(n)
			}
			walEnd, err := walStats(ctx, db)
			if err != nil {
				return r, err
			}
			r.WALRecords = float64(walEnd[0]-walStart[0]) / float64(n)
			r.WALBytes = float64(walEnd[1]-walStart[1]) / float64(n)
			progress(fmt.Sprintf("t+%5.1fs open=0", time.Since(t0).Seconds()))
			break
		}
		if time.Since(counted) >= max(10*time.Second, 50*countTook) {
			var open int
			c0 := time.Now()
			if err := db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE status = ANY($1)`,
				payment.Names(payment.Pending, payment.Processing)).Scan(&open); err != nil {
				return r, err
			}
			counted, countTook = time.Now(), time.Since(c0)
			progress(fmt.Sprintf("t+%5.1fs open=%d", time.Since(t0).Seconds(), open))
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("payments still open %s after the last due time", cfg.Timeout)
		}
		time.Sleep(time.Second)
	}
	time.Sleep(2 * time.Second) // the last events reach the watchers
	err = db.QueryRow(ctx, `
		WITH first AS (
			SELECT p.id, p.due_time, min(a.started_at) AS started
			FROM payments p JOIN payment_attempts a ON a.payment_id = p.id GROUP BY p.id, p.due_time)
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(epoch FROM started - due_time)),
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY EXTRACT(epoch FROM started - due_time))
		FROM first`).Scan(&r.LatP50, &r.LatP99)
	if err != nil {
		return r, fmt.Errorf("measure: %w", err)
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = $1), count(*) FILTER (WHERE status = $2),
		count(*) FILTER (WHERE status = $3) FROM payments`, string(payment.Completed), string(payment.Failed),
		string(payment.DeadLettered)).Scan(&r.Completed, &r.Failed, &r.Dead); err != nil {
		return r, err
	}
	progress("cdc lag p99 (ms) per 10 s from the first due time:" + cdc.windows(t0))
	r.CDCLagP50ms, r.CDCLagP99ms, r.ChangeBytes = cdc.percentiles()
	r.NoteP50ms, r.NoteP99ms, r.NoteBytes = notes.percentiles()
	seenMu.Lock()
	r.ConsumeP50ms, r.ConsumeP99ms, _ = percentiles(consume, 0)
	seenMu.Unlock()
	cc, err := grpc.NewClient(cfg.GatewayAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return r, err
	}
	defer cc.Close()
	rep, err := gatewayv1.NewGatewayAdminServiceClient(cc).Report(ctx, &gatewayv1.ReportRequest{})
	if err != nil {
		return r, fmt.Errorf("gateway report: %w", err)
	}
	r.DoubleCharged = len(rep.GetDoubleCharged())
	return r, nil
}
