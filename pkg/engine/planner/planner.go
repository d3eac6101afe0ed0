// Package planner makes recurring schedules' occurrences ahead: each pass
// locks a batch of schedules with occurrences due within the horizon (FOR
// UPDATE SKIP LOCKED), expands their rules (pkg/recurrence) from where
// each stands, writes the occurrences as ordinary PENDING payments and
// moves each schedule's place, all in one transaction. Any number of
// planners may run: two never hold one schedule, and a planner that dies
// mid-batch leaves it as it was, for the next pass. Every payments-api
// replica runs one.
package planner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/recurrence"
	"github.com/paysched/paysched/pkg/store"
)

// Config is a planner's.
type Config struct {
	// Horizon is how far ahead occurrences are made (35 days: a month's
	// occurrence exists, and can be seen and cancelled, before it is due).
	Horizon time.Duration
	// Interval is the pause between passes that found little to do.
	Interval time.Duration
	// Batch is how many schedules one pass (one transaction) plans.
	Batch int
	// Grace is how late an occurrence may be made and still count as on
	// time (due at once) rather than missed, whose fate is the schedule's
	// catch-up policy.
	Grace time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Defaults are a planner's defaults for its zero fields.
var Defaults = Config{Horizon: 35 * 24 * time.Hour, Interval: 5 * time.Second, Batch: 2000, Grace: time.Hour}

// WithDefaults is c with Defaults in its zero fields.
func (c Config) WithDefaults() Config {
	if c.Horizon == 0 {
		c.Horizon = Defaults.Horizon
	}
	if c.Interval == 0 {
		c.Interval = Defaults.Interval
	}
	if c.Batch == 0 {
		c.Batch = Defaults.Batch
	}
	if c.Grace == 0 {
		c.Grace = Defaults.Grace
	}
	return c
}

// Validate reports the first configuration error.
func (c Config) Validate() error {
	switch {
	case c.Horizon < time.Minute:
		return fmt.Errorf("--schedule-horizon must be at least 1m, got %s", c.Horizon)
	case c.Interval <= 0:
		return fmt.Errorf("--planner-interval must be positive, got %s", c.Interval)
	case c.Batch < 1 || c.Batch > 10000:
		return fmt.Errorf("--planner-batch must be 1 to 10000, got %d", c.Batch)
	case c.Grace < 0:
		return fmt.Errorf("--planner-grace must not be negative, got %s", c.Grace)
	}
	return nil
}

// Planner makes schedules' occurrences.
type Planner struct {
	cfg    Config
	db     pgdb.DB
	log    *slog.Logger
	made   prometheus.Counter
	seen   prometheus.Counter
	bad    prometheus.Counter
	remade prometheus.Counter
}

// New returns a planner over db (a pool: each pass is a transaction),
// registering its metrics on reg (nil: none).
func New(cfg Config, db pgdb.DB, reg prometheus.Registerer, log *slog.Logger) (*Planner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Planner{cfg: cfg, db: db, log: log,
		made: prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_planner_occurrences_total",
			Help: "Occurrence payments the planner made."}),
		seen: prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_planner_schedules_total",
			Help: "Schedules the planner planned (one per schedule per pass)."}),
		bad: prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_planner_unreadable_total",
			Help: "Schedules the planner could not read (their plan no longer parses): ended, never charged."}),
		remade: prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_planner_remade_total",
			Help: "Occurrences re-made because the zone rules (tzdata) moved their charge time."}),
	}
	if reg != nil {
		reg.MustRegister(p.made, p.seen, p.bad, p.remade)
	}
	return p, nil
}

// Run plans until ctx ends: at once again after a full batch, else after
// the interval.
func (p *Planner) Run(ctx context.Context) error {
	var zonesChecked time.Time
	for {
		if time.Since(zonesChecked) >= zoneCheckEvery {
			if n, err := p.CheckZones(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("planner: zone rules check failed; the next tries again", "err", err)
			} else if n > 0 {
				p.log.Info("planner: occurrences re-made after a change of zone rules", "remade", n)
			}
			zonesChecked = time.Now()
		}
		n, err := p.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("planner pass failed; the next pass tries again", "err", err)
		}
		wait := p.cfg.Interval
		if err == nil && n == p.cfg.Batch {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Pass applies the operators' approved schedule requests (a pause, a
// resume or a cancel a second admin approved; each in its own
// transaction), then plans one batch of schedules in one transaction and
// returns how many it planned.
func (p *Planner) Pass(ctx context.Context) (int, error) {
	now := p.cfg.Now()
	if _, err := store.ApplyScheduleRequests(ctx, p.db, now, maxRequestsPerPass); err != nil && ctx.Err() == nil {
		// The operators' requests wait for the next pass; the payers'
		// schedules are planned meanwhile.
		p.log.Warn("planner: applying the operators' schedule requests failed", "err", err)
	}
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx)
	scheds, err := store.DueSchedules(ctx, tx, now, now.Add(p.cfg.Horizon), p.cfg.Batch)
	if err != nil {
		return 0, err
	}
	var occs []store.Occurrence
	places := make([]store.Planned, 0, len(scheds))
	for i := range scheds {
		os, place := p.plan(&scheds[i], now)
		occs = append(occs, os...)
		places = append(places, place)
	}
	made, err := store.MakeOccurrences(ctx, tx, occs)
	if err != nil {
		return 0, err
	}
	if err := store.SetPlanned(ctx, tx, places); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	p.made.Add(float64(made))
	p.seen.Add(float64(len(scheds)))
	return len(scheds), nil
}

// plan expands one schedule from its place to the horizon: the
// occurrences to make and its new place.
func (p *Planner) plan(s *store.Schedule, now time.Time) ([]store.Occurrence, store.Planned) {
	place := store.Planned{Schedule: s.ID, LastOccurrence: s.LastOccurrence, LastIndex: s.LastIndex, State: store.ScheduleActive}
	it, err := walk(s)
	if err != nil {
		// Stored plans were read when made; one that no longer reads (a
		// calendar gone from a later build) is ended rather than guessed.
		p.bad.Inc()
		p.log.Error("schedule no longer reads: ended, nothing charged", "schedule", s.ID, "err", err)
		place.State = store.ScheduleEnded
		return nil, place
	}
	catch := catchUp(s)
	horizon, lateBy := now.Add(p.cfg.Horizon), now.Add(-p.cfg.Grace)
	var missed, onTime []recurrence.Occurrence
	for {
		o, ok := it.Next()
		if !ok {
			place.State, place.NextAt = store.ScheduleEnded, nil
			break
		}
		if o.At.After(horizon) {
			at := o.At
			place.NextAt = &at
			break
		}
		if o.At.Before(lateBy) {
			missed = append(missed, o)
		} else {
			onTime = append(onTime, o)
		}
		place.LastOccurrence, place.LastIndex = o.Nominal.String(), o.Index
		if len(missed)+len(onTime) >= maxPerPass {
			// A rule that makes more than this within the horizon (DAILY
			// over years of catch-up) goes on at the next pass.
			next := now
			place.NextAt = &next
			break
		}
	}
	var out []store.Occurrence
	rules, _ := recurrence.ZoneRules(s.Zone) // read once per zone per process
	for _, o := range append(catch.Keep(missed, s.CatchUpBound), onTime...) {
		due := o.At
		if due.Before(now) {
			due = now // late: due at once, never in a day whose partition is gone
		}
		id, err := uuid.NewV7()
		if err != nil {
			id = uuid.New()
		}
		out = append(out, store.Occurrence{Schedule: s.ID, Key: o.Nominal.String(), Index: o.Index, Payment: id, DueAt: due.UTC(), Rules: rules})
	}
	return out, place
}

// maxPerPass bounds the occurrences one schedule makes in one pass.
const maxPerPass = 1000

// maxRequestsPerPass bounds the operators' requests one pass applies (the
// rest wait for the next).
const maxRequestsPerPass = 100

// walk is an iterator over a schedule's plan from its place: past the
// last occurrence made, or from the start when none was.
func walk(s *store.Schedule) (*recurrence.Iter, error) {
	plan, err := Plan(s)
	if err != nil {
		return nil, err
	}
	if s.LastOccurrence == "" {
		return plan.Iter(), nil
	}
	last, err := recurrence.ParseWall(s.LastOccurrence)
	if err != nil {
		return nil, fmt.Errorf("place %q: %w", s.LastOccurrence, err)
	}
	return plan.IterAfter(last, s.LastIndex), nil
}

// catchUp is a schedule's catch-up policy (skip_missed when it no longer
// reads: never a burst by mistake).
func catchUp(s *store.Schedule) recurrence.CatchUp {
	c, err := recurrence.ParseCatchUp(s.CatchUp)
	if err != nil {
		return recurrence.SkipMissed
	}
	return c
}

// Plan reads a stored schedule's plan.
func Plan(s *store.Schedule) (recurrence.Plan, error) {
	return recurrence.Spec{Rule: s.Rule, Start: s.Start, Zone: s.Zone, MonthEnd: s.MonthEnd,
		BusinessDays: s.BusinessDays, Calendar: s.Calendar}.Plan()
}

// ErrNoOccurrence means a plan makes no occurrence at or after now.
var ErrNoOccurrence = errors.New("the rule makes no occurrence from now on")

// Place is where a new schedule starts: past the occurrences before now
// (a start in the past anchors the rule; it charges nothing from before
// the schedule existed), with its first occurrence at or after now.
func Place(plan recurrence.Plan, now time.Time) (store.Planned, recurrence.Occurrence, error) {
	var place store.Planned
	it := plan.Iter()
	for {
		o, ok := it.Next()
		if !ok {
			return place, recurrence.Occurrence{}, ErrNoOccurrence
		}
		if !o.At.Before(now) {
			at := o.At
			place.NextAt, place.State = &at, store.ScheduleActive
			return place, o, nil
		}
		place.LastOccurrence, place.LastIndex = o.Nominal.String(), o.Index
	}
}

// Ahead calls fn with each occurrence of an active schedule not made yet
// (after its place) that the planner will make due before until, and
// stops at max of them: the console's forecast. Those already due by now
// (a schedule just resumed, a planner behind) count as the planner counts
// them, by the schedule's catch-up policy. A schedule that no longer reads
// yields nothing (the planner ends it).
func Ahead(s *store.Schedule, now, until time.Time, max int, fn func(recurrence.Occurrence)) {
	if s.State != store.ScheduleActive {
		return
	}
	it, err := walk(s)
	if err != nil {
		return
	}
	catch := catchUp(s)
	var missed []recurrence.Occurrence
	defer func() {
		for _, o := range catch.Keep(missed, s.CatchUpBound) {
			fn(o)
		}
	}()
	for range max {
		o, ok := it.Next()
		if !ok || !o.At.Before(until) {
			return
		}
		if o.At.Before(now) {
			missed = append(missed, o)
			continue
		}
		fn(o)
	}
}

// zoneCheckEvery is how often a running planner compares the zone rules
// it reads with those the occurrences were made with (and at its start:
// a new build or a host's tzdata update starts a new process).
const zoneCheckEvery = time.Hour

// CheckZones re-makes the occurrences made ahead whose charge time the
// zone rules this process reads (its tzdata) move. Each occurrence records
// the fingerprint of the rules it was made with; for the active
// schedules' zones, the PENDING occurrences made ahead with other rules
// (by an older build, or another host's tzdata) are read again, a batch
// at a time: those whose instant differs are re-made (store.
// RemakeOccurrences: one a sweeper claimed, or an operator rescheduled, is
// left alone), the others stamped with this process's rules. It returns
// how many it re-made.
func (p *Planner) CheckZones(ctx context.Context) (int, error) {
	zones, err := store.ActiveZones(ctx, p.db)
	if err != nil {
		return 0, err
	}
	var names, rules []string
	for _, zone := range zones {
		r, err := recurrence.ZoneRules(zone)
		if err != nil {
			continue // a zone this build does not know: its schedules end at their next pass
		}
		names, rules = append(names, zone), append(rules, r)
	}
	if len(names) == 0 {
		return 0, nil
	}
	remade := 0
	for range maxRecheckBatches {
		n, done, err := p.recheck(ctx, names, rules)
		remade += n
		p.remade.Add(float64(n))
		if err != nil || done {
			return remade, err
		}
	}
	return remade, nil
}

// Rechecks are bounded per call: the next check goes on.
const (
	recheckBatch      = 1000
	maxRecheckBatches = 100
)

// recheck reads one batch of occurrences made with other rules, re-makes
// the moved ones and stamps the rest; done is true once none was left.
func (p *Planner) recheck(ctx context.Context, zones, rules []string) (int, bool, error) {
	now := p.cfg.Now()
	scheds, occs, err := store.AheadWithOtherRules(ctx, p.db, zones, rules, now, recheckBatch)
	if err != nil || len(occs) == 0 {
		return 0, true, err
	}
	plans := map[uuid.UUID]recurrence.Plan{}
	zoneOf := map[uuid.UUID]string{}
	for i := range scheds {
		if plan, err := Plan(&scheds[i]); err == nil {
			plans[scheds[i].ID] = plan
			zoneOf[scheds[i].ID] = scheds[i].Zone
		}
	}
	var read, moved, stamp []store.Occurrence
	for _, o := range occs {
		plan, ok := plans[o.Schedule]
		w, err := recurrence.ParseWall(o.Key)
		current, rerr := recurrence.ZoneRules(zoneOf[o.Schedule])
		if !ok || err != nil || rerr != nil {
			continue
		}
		at := plan.OccurrenceOf(o.Index, w).At
		if at.Before(now) {
			at = now // moved into the past: due at once, as a late one is
		}
		if at.Equal(o.DueAt) {
			o.Rules = current
			stamp = append(stamp, o)
			continue
		}
		id, err := uuid.NewV7()
		if err != nil {
			id = uuid.New()
		}
		read = append(read, o)
		moved = append(moved, store.Occurrence{Schedule: o.Schedule, Key: o.Key, Index: o.Index, Payment: id, DueAt: at.UTC(), Rules: current})
	}
	if err := store.StampRules(ctx, p.db, stamp); err != nil {
		return 0, false, err
	}
	n, err := store.RemakeOccurrences(ctx, p.db, read, moved)
	if err != nil {
		return 0, false, err
	}
	// A batch in which nothing changed (each one left alone: claimed
	// meanwhile) would be read again: stop until the next check.
	return n, len(stamp) == 0 && n == 0, nil
}
