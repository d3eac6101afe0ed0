package apibench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
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
	Rate, N                 int
	LatP50, LatP99          float64 // first attempt start - due, seconds
	CDCLagP99ms, NoteP99ms  float64
	DoubleCharged           int
	Completed, Failed, Dead int
}

func (r SteadyResult) String() string {
	return fmt.Sprintf("steady rate=%d payments=%d lateness_p50_s=%.3f lateness_p99_s=%.3f cdc_lag_p99_ms=%.0f notify_p99_ms=%.0f double_charged=%d",
		r.Rate, r.N, r.LatP50, r.LatP99, r.CDCLagP99ms, r.NoteP99ms, r.DoubleCharged)
}

// lagWatch records, per event, how long after its commit it was read.
type lagWatch struct {
	*topicTail
	mu   sync.Mutex
	lags []float64 // ms
}

func (w *lagWatch) add(ms float64) {
	w.mu.Lock()
	w.lags = append(w.lags, ms)
	w.mu.Unlock()
}

func (w *lagWatch) p99() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lags) == 0 {
		return -1
	}
	sort.Float64s(w.lags)
	return w.lags[min(len(w.lags)-1, len(w.lags)*99/100)]
}

// Steady schedules Rate payments due every second over Duration (created
// ahead), then watches them execute under the stack's faults, measuring
// lateness, CDC lag (commit to readable on Kafka) and notification lag
// (commit of the change to the CloudEvent readable on Kafka).
func Steady(ctx context.Context, cfg SteadyConfig, progress func(string)) (SteadyResult, error) {
	dog := watch(cfg.Pids, cfg.Logs)
	defer dog.close()
	n := cfg.Rate * int(cfg.Duration/time.Second)
	r := SteadyResult{Rate: cfg.Rate, N: n}
	// Created ahead, at about 12k/s: the load measured is the execution.
	lead := 10*time.Second + time.Duration(n/8000)*time.Second
	t0 := time.Now().Add(lead).Truncate(time.Second)
	step := time.Second / time.Duration(cfg.Rate)
	err := schedule(ctx, cfg.Config, n, 4, func(i int) *payschedv1.CreateScheduledPaymentRequest {
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
	cdc := &lagWatch{}
	cdc.topicTail, err = tailTopic(ctx, cfg.KafkaBrokers, kafka.Default.Payments, nil, func(rec *kgo.Record, now time.Time) {
		if ts, ok := envelope.SourceTsMs(rec.Value); ok && ts > 0 {
			cdc.add(float64(now.UnixMilli() - ts))
		}
	})
	if err != nil {
		return r, err
	}
	defer cdc.stop()
	notes := &lagWatch{}
	notes.topicTail, err = tailTopic(ctx, cfg.KafkaBrokers, kafka.Default.Notifications, nil, func(rec *kgo.Record, now time.Time) {
		for _, h := range rec.Headers {
			if h.Key == "ce_time" {
				if at, err := time.Parse(time.RFC3339Nano, string(h.Value)); err == nil {
					notes.add(float64(now.Sub(at).Microseconds()) / 1000)
				}
			}
		}
	})
	if err != nil {
		return r, err
	}
	defer notes.stop()
	// Planned as the services plan (svc.CustomPlans): a generic plan of the
	// drain check locked a year of partitions every poll, during the spike.
	db, err := svc.Pool(ctx, cfg.DatabaseURL, 4, svc.CustomPlans)
	if err != nil {
		return r, err
	}
	defer db.Close()
	deadline := t0.Add(cfg.Duration).Add(cfg.Timeout)
	for {
		if err := dog.failed(); err != nil {
			return r, err
		}
		var open int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM payments WHERE status = ANY($1)`,
			payment.Names(payment.Pending, payment.Processing)).Scan(&open); err != nil {
			return r, err
		}
		if time.Now().After(t0) {
			progress(fmt.Sprintf("t+%5.1fs open=%d", time.Since(t0).Seconds(), open))
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d payments still open %s after the last due time", open, cfg.Timeout)
		}
		time.Sleep(5 * time.Second)
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
	r.CDCLagP99ms, r.NoteP99ms = cdc.p99(), notes.p99()
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
