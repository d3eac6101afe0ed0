package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/reconcile/reconciledb"
	"github.com/paysched/paysched/pkg/store"
)

// Metrics are the reconciliation's Prometheus metrics. A nil *Metrics
// records nothing.
type Metrics struct {
	mismatches *prometheus.CounterVec
	runs       *prometheus.CounterVec
	repaired   prometheus.Counter
	charges    prometheus.Counter
	last       *prometheus.GaugeVec
	resolved   *prometheus.CounterVec
	unresolved prometheus.Counter
	webhooks   *prometheus.CounterVec
	// lastSuccess is when a run last succeeded (Unix seconds).
	lastSuccess prometheus.Gauge
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paysched_reconciliation_mismatches_total",
			Help: "Reconciliation findings that need a human, by kind (MISSING_AT_GATEWAY, AMOUNT_MISMATCH, DUPLICATE_CHARGE, UNKNOWN_CHARGE)."}, []string{"kind"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paysched_reconciliation_runs_total",
			Help: "Reconciliation runs by final state."}, []string{"state"}),
		repaired: prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_reconciliation_repaired_total",
			Help: "Payments moved to COMPLETED from the gateway's settlement report."}),
		charges: prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_reconciliation_charges_total",
			Help: "Settled charges read from the gateway's reports."}),
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "paysched_reconciliation_last_mismatches",
			Help: "Mismatches found by the last run of each kind."}, []string{"kind"}),
		resolved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paysched_ambiguous_resolved_total",
			Help: "Ambiguous dead letters settled by probing the gateway, by the status they moved to."}, []string{"status"}),
		unresolved: prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_ambiguous_resolve_failures_total",
			Help: "Ambiguous dead letters the resolver could not move after the gateway answered (postponed, never blocking the rest)."}),
		webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paysched_webhooks_total",
			Help: "Gateway webhooks received, by result."}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "paysched_reconciliation_last_success_timestamp_seconds",
			Help: "When the last reconciliation run succeeded (Unix seconds; the reconciler's first start when none has yet)."}),
	}
	reg.MustRegister(m.mismatches, m.runs, m.repaired, m.charges, m.last, m.resolved, m.unresolved, m.webhooks, m.lastSuccess)
	gateway.RegisterMetrics(reg)
	for _, k := range []string{KindMissingAtGateway, KindAmountMismatch, KindDuplicateCharge, KindUnknownCharge} {
		m.mismatches.WithLabelValues(k)
		m.last.WithLabelValues(k)
	}
	return m
}

func (m *Metrics) observe(r *Run) {
	if m == nil {
		return
	}
	m.runs.WithLabelValues(string(r.State)).Inc()
	if r.State != store.RunSucceeded {
		return
	}
	m.lastSuccess.Set(float64(r.FinishedAt.Unix()))
	m.charges.Add(float64(r.Charges))
	m.repaired.Add(float64(r.Repaired))
	for _, k := range []string{KindMissingAtGateway, KindAmountMismatch, KindDuplicateCharge, KindUnknownCharge} {
		m.mismatches.WithLabelValues(k).Add(float64(r.byKind[k]))
		m.last.WithLabelValues(k).Set(float64(r.byKind[k]))
	}
}

// Restore sets the last-success time from the runs recorded before this
// process started, so an alert on it survives restarts; with no success
// recorded yet it starts the clock now (a new installation gets a day to
// run its first reconciliation).
func (m *Metrics) Restore(ctx context.Context, db *pgxpool.Pool) error {
	last, err := reconciledb.New(db).LastSucceeded(ctx, string(store.RunSucceeded))
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("last successful reconciliation: %w", err)
	}
	t := time.Now()
	if last != nil {
		t = *last
	}
	m.lastSuccess.Set(float64(t.Unix()))
	return nil
}

func (m *Metrics) resolvedTo(status payment.Status) {
	if m != nil {
		m.resolved.WithLabelValues(string(status)).Inc()
	}
}

func (m *Metrics) resolveFailed() {
	if m != nil {
		m.unresolved.Inc()
	}
}

func (m *Metrics) webhook(result string) {
	if m != nil {
		m.webhooks.WithLabelValues(result).Inc()
	}
}
