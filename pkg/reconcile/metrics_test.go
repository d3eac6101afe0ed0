package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/reconcile"
)

// TestLastSuccessSurvivesRestarts: the gauge the 26-hour alert reads starts
// from the last successful run in the database (or now, before any), and a
// successful run moves it.
func TestLastSuccessSurvivesRestarts(t *testing.T) {
	e := newEnv(t)
	gauge := func(reg *prometheus.Registry) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "paysched_reconciliation_last_success_timestamp_seconds" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no last-success gauge")
		return 0
	}
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := reconcile.NewMetrics(reg)
	before := time.Now().Add(-time.Second).Unix()
	if err := m.Restore(ctx, e.db); err != nil {
		t.Fatal(err)
	}
	if got := gauge(reg); got < float64(before) {
		t.Fatalf("no run yet: gauge %v, want about now", got)
	}
	e.exec(`INSERT INTO reconciliation_runs (day, triggered_by, state, started_at, finished_at) VALUES ($1, 'test', 'SUCCEEDED', now() - interval '3 days', now() - interval '3 days')`, e.day.AddDate(0, 0, -3))
	reg = prometheus.NewRegistry()
	m = reconcile.NewMetrics(reg)
	if err := m.Restore(ctx, e.db); err != nil {
		t.Fatal(err)
	}
	if got, want := gauge(reg), float64(time.Now().Add(-72*time.Hour).Unix()); got > want+5 || got < want-5 {
		t.Fatalf("after a restart: gauge %v, want the run of 3 days ago (%v)", got, want)
	}
	r := &reconcile.Runner{DB: e.db, Gateway: e.gw, Metrics: m, Log: quiet}
	if _, err := r.Run(ctx, e.day, "test"); err != nil {
		t.Fatal(err)
	}
	if got := gauge(reg); got < float64(before) {
		t.Fatalf("after a successful run: gauge %v, want now", got)
	}
}
