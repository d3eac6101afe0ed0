package console

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/paysched/paysched/pkg/console/consoledb"
)

// The overview page: counts, the last hour, the engine, pacing and CDC, the next 24 h.

type overviewData struct {
	Counts     []StatusCount
	CountsAge  string
	Lateness   any
	Executed   any
	LastRate   float64
	LastP99    float64
	CDC        []cdcSlot
	Heartbeats []heartbeat
	Buckets    []bucket
	Forecast   []currencyForecast
	ForecastAt string
	// Weeks is the coming weeks' load, occurrences not yet made included.
	Weeks   WeekForecast
	WeeksAt string
}

type cdcSlot struct {
	Slot      string
	Active    bool
	BehindMB  float64
	Confirmed string
}

type heartbeat struct {
	Process     string
	Age         string
	Stale       bool
	BreakerOpen bool
	Executors   []struct {
		Addr     string `json:"addr"`
		Admitted bool   `json:"admitted"`
		Free     int64  `json:"free"`
		Streams  int32  `json:"streams"`
	}
}

type bucket struct {
	Name   string
	Tokens float64
	Age    string
}

type currencyForecast struct {
	Currency  string
	Count     int64
	Amount    int64
	PeakAt    time.Time
	PeakCount int64
	Chart     any
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, v *view) {
	ctx := r.Context()
	snap := c.cache.snapshot()
	now := c.now()
	d := overviewData{Counts: snap.Counts}
	if !snap.CountsAt.IsZero() {
		d.CountsAge = ago(now, snap.CountsAt)
	}
	var xs []time.Time
	var p50, p99, rate []float64
	for _, s := range snap.Samples {
		xs = append(xs, s.At)
		p50, p99 = append(p50, s.LatenessP50), append(p99, s.LatenessP99)
		rate = append(rate, float64(s.Executed)/s.Seconds)
	}
	if n := len(snap.Samples); n > 0 {
		d.LastRate, d.LastP99 = rate[n-1], p99[n-1]
	}
	from := now.Add(-history)
	d.Lateness = lineChart("Lateness of first attempts, last hour (seconds)", "s", from, now,
		[]series{{Name: "p50", Class: "s1", X: xs, Y: p50}, {Name: "p99", Class: "s2", X: xs, Y: p99}})
	d.Executed = lineChart("Executed per second, last hour", "", from, now, []series{{Name: "executed/s", Class: "s3", X: xs, Y: rate}})
	var err error
	if d.CDC, err = c.cdcSlots(ctx); err != nil {
		c.dbFail(w, r, v, "CDC slots", err)
		return
	}
	if d.Heartbeats, err = c.heartbeats(ctx, now); err != nil {
		c.dbFail(w, r, v, "engine heartbeats", err)
		return
	}
	if d.Buckets, err = c.buckets(ctx, now); err != nil {
		c.dbFail(w, r, v, "rate buckets", err)
		return
	}
	d.Forecast = forecastByCurrency(snap.Forecast, now)
	if !snap.ForecastAt.IsZero() {
		d.ForecastAt = ago(now, snap.ForecastAt)
	}
	d.Weeks = snap.Weeks
	if !snap.Weeks.At.IsZero() {
		d.WeeksAt = ago(now, snap.Weeks.At)
	}
	v.Title, v.Data, v.Live = "Overview", d, 10
	c.render(w, http.StatusOK, "overview.html", v)
}

func forecastByCurrency(ps []ForecastPoint, now time.Time) []currencyForecast {
	by := map[string]*currencyForecast{}
	xs := map[string][]time.Time{}
	ys := map[string][]float64{}
	for _, p := range ps {
		f := by[p.Currency]
		if f == nil {
			f = &currencyForecast{Currency: p.Currency}
			by[p.Currency] = f
		}
		f.Count += p.Count
		f.Amount += p.Amount
		if p.Count > f.PeakCount {
			f.PeakCount, f.PeakAt = p.Count, p.Minute
		}
		xs[p.Currency] = append(xs[p.Currency], p.Minute)
		ys[p.Currency] = append(ys[p.Currency], float64(p.Count))
	}
	var out []currencyForecast
	for cur, f := range by {
		f.Chart = barChart("Payments due per minute, next 24 h, "+cur, now.Truncate(time.Minute), now.Add(24*time.Hour), xs[cur], ys[cur])
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Amount > out[j].Amount || out[i].Amount == out[j].Amount && out[i].Currency < out[j].Currency
	})
	if len(out) > 8 {
		out = out[:8]
	}
	return out
}

func (c *Console) cdcSlots(ctx context.Context) ([]cdcSlot, error) {
	rows, err := consoledb.New(c.db).CDCSlots(ctx)
	if err != nil {
		return nil, err
	}
	var out []cdcSlot
	for _, r := range rows {
		out = append(out, cdcSlot{Slot: r.Slot, Active: r.Active.Bool, BehindMB: r.BehindMb, Confirmed: r.Confirmed})
	}
	return out, nil
}

func (c *Console) heartbeats(ctx context.Context, now time.Time) ([]heartbeat, error) {
	rows, err := consoledb.New(c.db).Heartbeats(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]heartbeat, 0, len(rows))
	for _, r := range rows {
		h := heartbeat{Process: r.Process}
		_ = json.Unmarshal([]byte(r.Info), &struct {
			BreakerOpen *bool `json:"breakerOpen"`
			Executors   any   `json:"executors"`
		}{BreakerOpen: &h.BreakerOpen, Executors: &h.Executors})
		h.Age, h.Stale = ago(now, r.SeenAt), now.Sub(r.SeenAt) > 30*time.Second
		out = append(out, h)
	}
	return out, nil
}

func (c *Console) buckets(ctx context.Context, now time.Time) ([]bucket, error) {
	rows, err := consoledb.New(c.db).Buckets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]bucket, 0, len(rows))
	for _, r := range rows {
		out = append(out, bucket{Name: r.Name, Tokens: r.Tokens, Age: ago(now, r.RefreshedAt)})
	}
	return out, nil
}
