package console

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/paysched/paysched/pkg/console/consoledb"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store"
)

// The overview's figures come from background work, never from the
// request: a page is a read of memory. Each statement is bounded.
const (
	countsEvery   = 10 * time.Second
	forecastEvery = time.Minute
	// weeksEvery: the weekly forecast expands every active schedule.
	weeksEvery  = 10 * time.Minute
	sampleEvery = 10 * time.Second
	// countCap bounds an exact count through a partial index; past it the
	// page shows "100,000+".
	countCap = 100000
	// history is how much the lateness chart shows.
	history = time.Hour
)

// maxTenantRates bounds the per-tenant rates kept in memory: a tenant
// beyond the busiest 10,000 of the last interval shows as "under" the
// least of them.
const maxTenantRates = 10000

// atRestLabel heads the count of rows at rest while their split is not
// known yet.
const atRestLabel = "AT REST"

// StatusCount is one status's count on the overview.
type StatusCount struct {
	Status   string
	N        int64
	Capped   bool // at least N
	Estimate bool // from statistics
}

// ForecastPoint is what falls due in one minute in one currency.
type ForecastPoint struct {
	Minute   time.Time
	Currency string
	Count    int64
	Amount   int64
}

// Sample is one interval of attempts.
type Sample struct {
	At                                        time.Time
	Seconds                                   float64
	Executed                                  int64
	Succeeded, Declined, Retryable, Ambiguous int64
	LatenessP50, LatenessP99                  float64
}

type cache struct {
	db  pgdb.DB
	log *slog.Logger

	mu         sync.Mutex
	counts     []StatusCount
	countsAt   time.Time
	forecast   []ForecastPoint
	forecastAt time.Time
	weeks      WeekForecast
	samples    []Sample
	sampledTo  time.Time
	// tenantRates is executed/s per tenant over the last fine interval
	// (sampleEvery), its floor the least rate kept when the list was cut.
	tenantRates     map[string]float64
	tenantRateFloor float64
	tenantRatesAt   time.Time
}

// TenantRate is one tenant's executed/s over the last sampled interval.
type TenantRate struct {
	PerSecond float64
	// Under says the tenant was not among the busiest kept: its rate is
	// at most PerSecond.
	Under bool
	At    time.Time
}

// tenantRate is tenant's executed/s as last sampled; ok is false before
// the first fine interval.
func (c *cache) tenantRate(tenant string) (TenantRate, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tenantRatesAt.IsZero() {
		return TenantRate{}, false
	}
	if r, ok := c.tenantRates[tenant]; ok {
		return TenantRate{PerSecond: r, At: c.tenantRatesAt}, true
	}
	return TenantRate{PerSecond: c.tenantRateFloor, Under: c.tenantRateFloor > 0, At: c.tenantRatesAt}, true
}

func newCache(db pgdb.DB, log *slog.Logger) *cache { return &cache{db: db, log: log} }

func (c *cache) run(ctx context.Context) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	var lastForecast, lastWeeks time.Time
	for {
		c.refreshCounts(ctx)
		c.sample(ctx)
		if time.Since(lastForecast) >= forecastEvery {
			c.refreshForecast(ctx)
			lastForecast = time.Now()
		}
		if time.Since(lastWeeks) >= weeksEvery {
			c.refreshWeeks(ctx)
			lastWeeks = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (c *cache) refreshCounts(ctx context.Context) {
	refresh(ctx, c, "counts", 5*time.Second, func(ctx context.Context) ([]StatusCount, error) { return loadCounts(ctx, c.db) },
		func(out []StatusCount) { c.counts, c.countsAt = out, time.Now() })
}

// refresh runs load within timeout and keeps what it answers with keep
// (under c.mu). A failure is logged, unless the context ended (the process
// is stopping), and the figures last kept stay on the page.
func refresh[T any](ctx context.Context, c *cache, what string, timeout time.Duration, load func(context.Context) (T, error), keep func(T)) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := load(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("console: "+what, "err", err)
		}
		return
	}
	c.mu.Lock()
	keep(out)
	c.mu.Unlock()
}

func loadCounts(ctx context.Context, db pgdb.DB) ([]StatusCount, error) {
	est := map[string]int64{}
	ests, err := consoledb.New(db).EstimateStatuses(ctx)
	if err != nil {
		return nil, fmt.Errorf("estimate counts: %w", err)
	}
	for _, e := range ests {
		est[e.Status] = e.N
	}
	var out []StatusCount
	var open int64
	// The exact counts span every partition, a year of them made ahead
	// (PENDING rows live in all): planned for each call, as admin-api's
	// custom plans would, each cost ~0.1-0.5 s of planning alone every 10 s.
	// Their plans depend on nothing but the cap, so each connection plans
	// them once and keeps the plan.
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("count: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	q := consoledb.New(tx)
	if err := q.ForceGenericPlans(ctx); err != nil {
		return nil, fmt.Errorf("count: %w", err)
	}
	for _, s := range []payment.Status{payment.Pending, payment.Processing, payment.DeadLettered} {
		n, err := cappedCount[s](q, ctx, countCap+1)
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", s, err)
		}
		out = append(out, StatusCount{Status: string(s), N: min(n, countCap), Capped: n > countCap})
		open += n
	}
	live, err := consoledb.New(db).LiveRows(ctx)
	if err != nil {
		return nil, fmt.Errorf("count rows: %w", err)
	}
	// The rows at rest, split as the last analyze saw them; before any
	// analyze saw one, their total alone.
	atRest := max(0, live-open)
	rest := []payment.Status{payment.Completed, payment.Failed, payment.Cancelled}
	var seen int64
	for _, s := range rest {
		seen += est[string(s)]
	}
	if seen == 0 {
		return append(out, StatusCount{Status: atRestLabel, N: atRest, Estimate: true}), nil
	}
	for _, s := range rest {
		out = append(out, StatusCount{Status: string(s), N: atRest * est[string(s)] / seen, Estimate: true})
	}
	return out, nil
}

func (c *cache) refreshForecast(ctx context.Context) {
	refresh(ctx, c, "forecast", 20*time.Second, func(ctx context.Context) ([]ForecastPoint, error) { return loadForecast(ctx, c.db) },
		func(out []ForecastPoint) { c.forecast, c.forecastAt = out, time.Now() })
}

func (c *cache) refreshWeeks(ctx context.Context) {
	refresh(ctx, c, "weekly forecast", 5*time.Minute, func(ctx context.Context) (WeekForecast, error) {
		return loadWeekForecast(ctx, c.db, time.Now())
	}, func(out WeekForecast) { c.weeks = out })
}

func loadForecast(ctx context.Context, db pgdb.DB) ([]ForecastPoint, error) {
	// A payment runs at or after its due time: the day's are due within it.
	rows, err := consoledb.New(db).Forecast(ctx, store.DueBound(time.Now().Add(24*time.Hour)))
	if err != nil {
		return nil, fmt.Errorf("forecast: %w", err)
	}
	var out []ForecastPoint
	for _, r := range rows {
		out = append(out, ForecastPoint{Minute: r.Minute, Currency: r.Currency, Count: r.N, Amount: r.Amount})
	}
	return out, nil
}

// sample adds the intervals since the last one (the last hour at the
// first call, an interval at a time: each statement reads one interval's
// attempts).
func (c *cache) sample(ctx context.Context) {
	now := time.Now().Truncate(time.Second)
	c.mu.Lock()
	from := c.sampledTo
	c.mu.Unlock()
	if from.IsZero() || now.Sub(from) > history {
		from = now.Add(-history)
	}
	for from.Before(now) && ctx.Err() == nil {
		step := sampleEvery
		if now.Sub(from) > 10*time.Minute {
			step = time.Minute // catching up: coarser
		}
		to := from.Add(step)
		if to.After(now) {
			to = now
		}
		s, err := loadSample(ctx, c.db, from, to)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("console: sample", "err", err)
			}
			return
		}
		if step == sampleEvery && now.Sub(to) < 2*sampleEvery {
			// Only the latest fine interval is worth a rate per tenant.
			rates, floor, err := loadTenantRates(ctx, c.db, from, to)
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("console: tenant rates", "err", err)
				}
				return
			}
			c.mu.Lock()
			c.tenantRates, c.tenantRateFloor, c.tenantRatesAt = rates, floor, to
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.samples = append(c.samples, s)
		cut := sort.Search(len(c.samples), func(i int) bool { return c.samples[i].At.After(now.Add(-history)) })
		c.samples = append([]Sample(nil), c.samples[cut:]...)
		c.sampledTo = to
		c.mu.Unlock()
		from = to
	}
}

func loadSample(ctx context.Context, db pgdb.DB, from, to time.Time) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s := Sample{At: to, Seconds: to.Sub(from).Seconds()}
	r, err := consoledb.New(db).SampleAttempts(ctx, consoledb.SampleAttemptsParams{After: from, Until: to})
	if err != nil {
		return s, fmt.Errorf("sample attempts: %w", err)
	}
	s.Executed, s.Succeeded, s.Declined, s.Retryable, s.Ambiguous = r.Executed, r.Succeeded, r.Declined, r.Retryable, r.Ambiguous
	s.LatenessP50, s.LatenessP99 = r.LatenessP50, r.LatenessP99
	return s, nil
}

func loadTenantRates(ctx context.Context, db pgdb.DB, from, to time.Time) (map[string]float64, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := consoledb.New(db).TenantRates(ctx, consoledb.TenantRatesParams{After: from, Until: to, Max: maxTenantRates})
	if err != nil {
		return nil, 0, fmt.Errorf("tenant rates: %w", err)
	}
	secs := to.Sub(from).Seconds()
	rates := map[string]float64{}
	var least float64
	for _, r := range rows {
		rates[r.Tenant] = float64(r.N) / secs
		least = float64(r.N) / secs
	}
	floor := 0.0
	if len(rates) == maxTenantRates {
		floor = least
	}
	return rates, floor, nil
}

// snapshot is the cache as a page reads it.
type snapshot struct {
	Counts     []StatusCount
	CountsAt   time.Time
	Forecast   []ForecastPoint
	ForecastAt time.Time
	Weeks      WeekForecast
	Samples    []Sample
}

func (c *cache) snapshot() snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return snapshot{Counts: c.counts, CountsAt: c.countsAt, Forecast: c.forecast, ForecastAt: c.forecastAt, Weeks: c.weeks,
		Samples: append([]Sample(nil), c.samples...)}
}

// Refresh runs the overview's background work once, now, and says how
// long each part took (make bench-console reports it; the console itself
// runs it on its own schedule).
func (c *Console) Refresh(ctx context.Context) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, f := range map[string]func(context.Context){
		"counts": c.cache.refreshCounts, "forecast": c.cache.refreshForecast, "samples": c.cache.sample,
		"weeks": c.cache.refreshWeeks,
	} {
		t0 := time.Now()
		f(ctx)
		out[name] = time.Since(t0)
	}
	return out
}
