package apibench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/svc"
)

// SpikeConfig describes the due-time spike benchmark.
type SpikeConfig struct {
	Config
	N int
	// Lead is how far ahead the shared due time is set; 0: measured
	// (calibrate), so that a slow machine only waits longer.
	Lead        time.Duration
	DatabaseURL string
	// AuditDatabaseURL is the audit log's database (empty: DatabaseURL).
	AuditDatabaseURL string
	Pids             map[string]int // process name -> pid, for peak RSS and CPU
	// Logs name each process's log, quoted when it exits early.
	Logs    map[string]string
	Timeout time.Duration
	// KafkaBrokers, when set, measures CDC: commit to the event seen on
	// Kafka, and how long the audit log takes to catch up.
	KafkaBrokers []string
	// Occurrences makes the N payments occurrences of N monthly recurring
	// schedules, planned by the planner, instead of creating them through
	// the API (make bench-schedules' spike).
	Occurrences bool
}

// SpikeResult is what the spike measured.
type SpikeResult struct {
	// Account is the CPU per payment in its three parts, from the due
	// time to the drain.
	Account                         Account
	N                               int
	ExecutedPerS                    float64
	LatP50, LatP99, LatMax, DrainS  float64
	RSSMB                           map[string]int
	MaxRSSMB                        int
	Completed, Failed, Dead, Others int
	CDC                             bool
	CDCLagP50, CDCLagP99            float64
	AuditCatchupS                   float64
	// CatchupCPUus is CPU µs per payment by process from the drain until
	// the audit log caught up (CDC only).
	CatchupCPUus map[string]float64
	// CPUus is CPU µs per payment by process (postgres: all its
	// processes), from the due time to the drain.
	CPUus map[string]float64
	// WALBytes is the WAL written per payment from the due time until the
	// last was executed (the audit log's writes included when it runs).
	WALBytes float64
	// WALRecords is the cluster's WAL records per payment over the same
	// span (pg_stat_wal), and WALRange its first and last LSN (for
	// pg_waldump --stats).
	WALRecords float64
	WALRange   [2]string
}

// Spike schedules N payments all due in the same second through the API
// (batchCreate), waits until every one is terminal, and measures lateness
// (due time to first attempt) and the time to drain.
func Spike(ctx context.Context, cfg SpikeConfig, progress func(string)) (SpikeResult, error) {
	dog := watch(cfg.Pids, cfg.Logs)
	defer dog.close()
	if cfg.Lead == 0 && cfg.Occurrences {
		cfg.Lead = occurrencesLead(cfg.N)
	}
	if cfg.Lead == 0 {
		lead, err := calibrate(ctx, cfg.Config, cfg.DatabaseURL, cfg.N, progress)
		if err != nil {
			return SpikeResult{}, err
		}
		cfg.Lead = lead
	}
	due := time.Now().Add(cfg.Lead).Truncate(time.Second)
	var err error
	if cfg.Occurrences {
		err = makeOccurrences(ctx, cfg.DatabaseURL, cfg.N, due)
	} else {
		err = schedule(ctx, cfg.Config, cfg.N, 8, func(i int) *payschedv1.CreateScheduledPaymentRequest {
			return &payschedv1.CreateScheduledPaymentRequest{Payee: fmt.Sprint("payee-", i), Amount: int64(100 + i%cfg.BatchSize),
				Currency: "USD", DueAt: timestamppb.New(due), RequestId: fmt.Sprintf("%s-s-%d", cfg.RunID, i)}
		})
	}
	if err != nil {
		return SpikeResult{}, err
	}
	if time.Now().After(due) {
		return SpikeResult{}, fmt.Errorf("scheduling took longer than the lead (%s): raise --lead", cfg.Lead)
	}
	progress(fmt.Sprintf("scheduled %d payments due at %s (in %.1fs)", cfg.N, due.Format(time.RFC3339), time.Until(due).Seconds()))
	var lagWatch *cdcWatch
	var notes *noteWatch
	if len(cfg.KafkaBrokers) > 0 {
		lagWatch, err = watchCDC(ctx, cfg.KafkaBrokers)
		if err != nil {
			return SpikeResult{}, err
		}
		defer lagWatch.stop()
		if notes, err = watchNotes(ctx, cfg.KafkaBrokers); err != nil {
			return SpikeResult{}, err
		}
		defer notes.stop()
	}
	// Planned as the services plan (svc.CustomPlans): a generic plan of the
	// drain check locked a year of partitions every poll, during the spike.
	db, err := svc.Pool(ctx, cfg.DatabaseURL, 4, svc.CustomPlans)
	if err != nil {
		return SpikeResult{}, err
	}
	defer db.Close()
	auditDB := db
	if cfg.AuditDatabaseURL != "" && cfg.AuditDatabaseURL != cfg.DatabaseURL {
		if auditDB, err = svc.Pool(ctx, cfg.AuditDatabaseURL, 2, svc.CustomPlans); err != nil {
			return SpikeResult{}, err
		}
		defer auditDB.Close()
	}
	deadline := time.Now().Add(cfg.Timeout)
	time.Sleep(time.Until(due)) // nothing is open to watch before
	cpu := newCPUMeter(cfg.Pids, pgLabels(ctx, db))
	acct := startAccount()
	var account Account
	var walStart string
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&walStart); err != nil {
		return SpikeResult{}, err
	}
	recStart, err := walStats(ctx, db)
	if err != nil {
		return SpikeResult{}, err
	}
	var walBytes int64
	var walEnd string
	var recEnd [2]int64
	var used map[string]time.Duration
	var counted time.Time
	var countTook time.Duration
	for {
		if err := dog.failed(); err != nil {
			return SpikeResult{}, err
		}
		// Whether anything is still open is two index probes; how much is
		// open reads every open row (~0.15 s of a database core at 200,000),
		// so it is counted for the progress lines at most a fiftieth of the
		// time: polled often, it slowed the spike it measured.
		left, err := anyOpen(ctx, db, due.Add(time.Hour))
		if err != nil {
			return SpikeResult{}, err
		}
		if !left {
			used = cpu.since()
			account = acct.finish(used, cfg.N, "payment")
			if err := db.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint, pg_current_wal_lsn()::text`,
				walStart).Scan(&walBytes, &walEnd); err != nil {
				return SpikeResult{}, err
			}
			if recEnd, err = walStats(ctx, db); err != nil {
				return SpikeResult{}, err
			}
			progress(fmt.Sprintf("t+%5.1fs open=0", time.Since(due).Seconds()))
			break
		}
		if time.Since(counted) >= max(time.Second, 50*countTook) {
			var open int
			t0 := time.Now()
			if err := db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE status = ANY($1)`, payment.Names(payment.Pending, payment.Processing)).Scan(&open); err != nil {
				return SpikeResult{}, err
			}
			counted, countTook = time.Now(), time.Since(t0)
			progress(fmt.Sprintf("t+%5.1fs open=%d", time.Since(due).Seconds(), open))
		}
		if time.Now().After(deadline) {
			return SpikeResult{}, fmt.Errorf("payments still open after %s", cfg.Timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
	r := SpikeResult{N: cfg.N, RSSMB: map[string]int{}, CPUus: map[string]float64{}, WALBytes: float64(walBytes) / float64(cfg.N),
		WALRecords: float64(recEnd[0]-recStart[0]) / float64(cfg.N), WALRange: [2]string{walStart, walEnd}, Account: account}
	for name, d := range used {
		r.CPUus[name] = float64(d.Microseconds()) / float64(cfg.N)
	}
	// The audit catch-up first: the measuring queries below read every
	// payment and attempt (seconds of CPU on parallel workers) and would
	// compete with the very catch-up being timed.
	if lagWatch != nil {
		r.CDC = true
		var lastFinish time.Time
		if err := db.QueryRow(ctx, `SELECT max(finished_at) FROM payment_attempts`).Scan(&lastFinish); err != nil {
			return r, err
		}
		// The audit consumer publishes a payment's terminal notification
		// only after writing its audit row, so the moment the last one
		// arrives bounds the catch-up from above; the database then
		// confirms it. (Polling count(DISTINCT payment_id) over the whole
		// log instead took up to 2 s of CPU per call, with parallel
		// workers, competing with the consumer it measured.)
		caughtUp, ok := notes.waitAll(cfg.N, deadline, dog.failed)
		// What the catch-up cost, by process, from the drain to here.
		after := cpu.since()
		r.CatchupCPUus = map[string]float64{}
		for name, d := range after {
			r.CatchupCPUus[name] = float64((d - used[name]).Microseconds()) / float64(cfg.N)
		}
		atRest := payment.Names(payment.Completed, payment.Failed, payment.DeadLettered, payment.Cancelled)
		for {
			var n int
			if err := auditDB.QueryRow(ctx, `SELECT count(DISTINCT payment_id) FROM audit_events WHERE table_name = 'payments'
				AND status = ANY($1)`, atRest).Scan(&n); err != nil {
				return r, err
			}
			if n >= cfg.N {
				if !ok {
					caughtUp = time.Now()
				}
				r.AuditCatchupS = max(0, caughtUp.Sub(lastFinish).Seconds())
				break
			}
			// Not every notification came (or the log disagrees): poll.
			ok = false
			if err := dog.failed(); err != nil {
				return r, err
			}
			if time.Now().After(deadline) {
				return r, fmt.Errorf("audit log has %d of %d terminal payments", n, cfg.N)
			}
			time.Sleep(time.Second)
		}
		time.Sleep(time.Second) // the last events reach the watcher
		r.CDCLagP50, r.CDCLagP99 = lagWatch.percentiles()
	}
	err = db.QueryRow(ctx, `
		WITH first AS (
			SELECT p.id, p.due_time, min(a.started_at) AS started, max(a.finished_at) AS finished
			FROM payments p JOIN payment_attempts a ON a.payment_id = p.id GROUP BY p.id, p.due_time)
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(epoch FROM started - due_time)),
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY EXTRACT(epoch FROM started - due_time)),
		       max(EXTRACT(epoch FROM started - due_time)),
		       EXTRACT(epoch FROM max(finished) - min(due_time))
		FROM first`).Scan(&r.LatP50, &r.LatP99, &r.LatMax, &r.DrainS)
	if err != nil {
		return r, fmt.Errorf("measure: %w", err)
	}
	err = db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = $1), count(*) FILTER (WHERE status = $2),
		count(*) FILTER (WHERE status = $3), count(*) FILTER (WHERE status NOT IN ($1, $2, $3))
		FROM payments`, string(payment.Completed), string(payment.Failed), string(payment.DeadLettered)).Scan(&r.Completed, &r.Failed, &r.Dead, &r.Others)
	if err != nil {
		return r, err
	}
	r.ExecutedPerS = float64(cfg.N) / r.DrainS
	for name, pid := range cfg.Pids {
		mb := peakRSS(pid)
		r.RSSMB[name] = mb
		r.MaxRSSMB = max(r.MaxRSSMB, mb)
	}
	return r, nil
}

// peakRSS reads VmHWM (peak resident set) of a live process, in MiB.
func peakRSS(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.Atoi(f[1])
				return kb / 1024
			}
		}
	}
	return -1
}

// topicTail reads a topic from its end in the background and hands each
// record, with the time it was read, to fn until stopped.
type topicTail struct {
	cl     *kgo.Client
	cancel context.CancelFunc
}

// tailTopic starts a topicTail of topic, or of only the given partitions.
func tailTopic(ctx context.Context, brokers []string, topic string, partitions []int32, fn func(r *kgo.Record, now time.Time)) (*topicTail, error) {
	consume := kgo.ConsumeTopics(topic)
	if len(partitions) > 0 {
		offsets := map[int32]kgo.Offset{}
		for _, p := range partitions {
			offsets[p] = kgo.NewOffset().AtEnd()
		}
		consume = kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), consume,
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		for wctx.Err() == nil {
			fs := cl.PollFetches(wctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { fn(r, now) })
		}
	}()
	return &topicTail{cl: cl, cancel: cancel}, nil
}

func (t *topicTail) stop() {
	t.cancel()
	t.cl.Close()
}

// cdcWatch consumes the payments change topic during the spike and records,
// for each event, how long after its commit it could be read from Kafka. It
// reads one partition: keys spread payments evenly over partitions and the
// connector produces to all of them in commit order, so a sixth of the events
// is a fair sample (over 60,000 at the default spike) for a sixth of the
// watcher's load on the machine it measures.
type cdcWatch struct {
	*topicTail
	mu   sync.Mutex
	lags []float64
}

func watchCDC(ctx context.Context, brokers []string) (*cdcWatch, error) {
	w := &cdcWatch{}
	t, err := tailTopic(ctx, brokers, kafka.DefaultTopics.Payments, []int32{0}, func(r *kgo.Record, now time.Time) {
		// The commit time is source.ts_ms; find it without decoding the
		// whole envelope (the watcher must not load the machine).
		if ms, ok := envelope.SourceTsMs(r.Value); ok {
			w.mu.Lock()
			w.lags = append(w.lags, now.Sub(time.UnixMilli(ms)).Seconds())
			w.mu.Unlock()
		}
	})
	if err != nil {
		return nil, err
	}
	w.topicTail = t
	return w, nil
}

func (w *cdcWatch) percentiles() (float64, float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lags) == 0 {
		return -1, -1
	}
	s := append([]float64(nil), w.lags...)
	sort.Float64s(s)
	return s[len(s)/2], s[len(s)*99/100]
}

// noteWatch consumes the notifications published during the spike and
// records when the last payment's terminal notification arrived.
type noteWatch struct {
	*topicTail
	mu       sync.Mutex
	terminal map[string]bool
	last     time.Time
}

func watchNotes(ctx context.Context, brokers []string) (*noteWatch, error) {
	w := &noteWatch{terminal: map[string]bool{}}
	t, err := tailTopic(ctx, brokers, kafka.DefaultTopics.Notifications, nil, func(r *kgo.Record, now time.Time) {
		switch string(notification.Header(r, notification.HeaderType)) {
		case "paysched.payment.completed", "paysched.payment.failed", "paysched.payment.dead_lettered", "paysched.payment.cancelled":
			w.mu.Lock()
			if !w.terminal[string(r.Key)] {
				w.terminal[string(r.Key)] = true
				w.last = now
			}
			w.mu.Unlock()
		}
	})
	if err != nil {
		return nil, err
	}
	w.topicTail = t
	return w, nil
}

// waitAll waits until n payments had a terminal notification and returns
// when the last one arrived; false if the deadline passed first.
func (w *noteWatch) waitAll(n int, deadline time.Time, failed func() error) (time.Time, bool) {
	for {
		if failed() != nil {
			return time.Time{}, false
		}
		w.mu.Lock()
		got, last := len(w.terminal), w.last
		w.mu.Unlock()
		if got >= n {
			return last, true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// calibrate measures this machine's create rate on a sample scheduled a
// day ahead (then deleted, as the superuser the benchmarks connect as),
// and returns a lead that schedules total payments at half that rate,
// plus 5 s. It reports the rate and the lead through progress, as every
// benchmark that calibrates prints them.
func calibrate(ctx context.Context, cfg Config, databaseURL string, total int, progress func(string)) (time.Duration, error) {
	n := max(2000, min(total/20, 20_000))
	far := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	t0 := time.Now()
	if err := schedule(ctx, cfg, n, 8, func(i int) *payschedv1.CreateScheduledPaymentRequest {
		return &payschedv1.CreateScheduledPaymentRequest{Payee: "calibration", Amount: 100, Currency: "USD",
			DueAt: timestamppb.New(far), RequestId: fmt.Sprintf("%s-c-%d", cfg.RunID, i)}
	}); err != nil {
		return 0, fmt.Errorf("calibrate: %w", err)
	}
	rate := float64(n) / time.Since(t0).Seconds()
	db, err := svc.Pool(ctx, databaseURL, 1)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `WITH gone AS (DELETE FROM payments WHERE due_time = $1 AND payee = 'calibration' RETURNING id)
		DELETE FROM payment_index WHERE id IN (SELECT id FROM gone)`, far); err != nil {
		return 0, fmt.Errorf("calibrate: delete the sample: %w", err)
	}
	lead := 5*time.Second + time.Duration(2*float64(total)/rate*float64(time.Second)).Round(time.Second)
	progress(fmt.Sprintf("creates measured at %.0f/s: lead %s", rate, lead))
	return lead, nil
}

// schedule creates n payments through batchCreate, conc requests at a
// time over a few connections; item builds the i-th.
func schedule(ctx context.Context, cfg Config, n, conc int, item func(i int) *payschedv1.CreateScheduledPaymentRequest) error {
	clients, closeAll, err := dialPool(cfg, 4)
	if err != nil {
		return err
	}
	defer closeAll()
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cfg.Token)
	sem := make(chan struct{}, conc)
	errc := make(chan error, n/cfg.BatchSize+1)
	for start := 0; start < n; start += cfg.BatchSize {
		sem <- struct{}{}
		go func(start int) {
			defer func() { <-sem }()
			items := make([]*payschedv1.CreateScheduledPaymentRequest, min(cfg.BatchSize, n-start))
			for j := range items {
				items[j] = item(start + j)
			}
			_, err := clients[start/cfg.BatchSize%len(clients)].BatchCreateScheduledPayments(actx,
				&payschedv1.BatchCreateScheduledPaymentsRequest{Items: items})
			errc <- err
		}(start)
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	close(errc)
	for err := range errc {
		if err != nil {
			return fmt.Errorf("schedule: %w", err)
		}
	}
	return nil
}
