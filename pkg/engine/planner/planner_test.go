package planner_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/recurrence"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is a settable test clock, shared by planners.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// day0 is a fixed instant: the tests never wait for, nor depend on, the
// wall clock.
var day0 = time.Date(2027, 1, 10, 12, 0, 0, 0, time.UTC)

func newPlanner(t *testing.T, db pgdb.DB, c *clock, horizon time.Duration) *planner.Planner {
	t.Helper()
	p, err := planner.New(planner.Config{Horizon: horizon, Interval: time.Millisecond, Batch: 7, Grace: time.Hour, Now: c.now},
		db, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ensurePartitions makes the payments partitions the test's days need.
func ensurePartitions(t *testing.T, db *pgxpool.Pool, from, to time.Time) {
	t.Helper()
	if _, err := store.EnsurePartitions(context.Background(), db, from.AddDate(0, 0, -2), to.AddDate(0, 0, 2)); err != nil {
		t.Fatal(err)
	}
}

// createSchedule writes a schedule placed as the API places it.
func createSchedule(t *testing.T, db pgdb.DB, now time.Time, rule, start, zone, catchUp string) *store.Schedule {
	t.Helper()
	s := store.Schedule{ID: uuid.New(), Payer: "payer-" + uuid.NewString()[:8], Payee: "landlord", Amount: 120000, Currency: "EUR",
		Rule: rule, Start: start, Zone: zone, MonthEnd: "CLAMP", BusinessDays: "NONE", CatchUp: catchUp, CatchUpBound: 12,
		IdempotencyKey: uuid.NewString()}
	plan, err := planner.Plan(&s)
	if err != nil {
		t.Fatal(err)
	}
	place, _, err := planner.Place(plan, now)
	if err != nil {
		t.Fatal(err)
	}
	s.NextAt, s.LastOccurrence, s.LastIndex = place.NextAt, place.LastOccurrence, place.LastIndex
	got, replay, err := store.CreateSchedule(context.Background(), db, s)
	if err != nil || replay {
		t.Fatalf("create schedule: %v (replay %v)", err, replay)
	}
	return got
}

// made is every occurrence payment of a schedule: key -> count and its
// payments' statuses.
func made(t *testing.T, db pgdb.DB, id uuid.UUID) (keys map[string]int, statuses map[string]string) {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT occurrence, status FROM payments WHERE schedule_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	keys, statuses = map[string]int{}, map[string]string{}
	for rows.Next() {
		var k, st string
		if err := rows.Scan(&k, &st); err != nil {
			t.Fatal(err)
		}
		if st != "CANCELLED" {
			keys[k]++
		}
		statuses[k] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys, statuses
}

// expected is every key plan makes from the first at or after from through
// until.
func expected(t *testing.T, s *store.Schedule, from, until time.Time) []string {
	t.Helper()
	plan, err := planner.Plan(s)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	it := plan.Iter()
	for {
		o, ok := it.Next()
		if !ok || o.At.After(until) {
			return out
		}
		if !o.At.Before(from) {
			out = append(out, o.Nominal.String())
		}
	}
}

// TestTwoPlannersMakeEachOccurrenceOnce: two planners pass at once, again
// and again, while the clock walks four months; every occurrence within
// the horizon exists exactly once, none is missing, and none was made
// before the horizon reached it.
func TestTwoPlannersMakeEachOccurrenceOnce(t *testing.T) {
	db := pgtest.NewPool(t)
	ensurePartitions(t, db, day0, day0.AddDate(0, 6, 0))
	c := &clock{}
	c.set(day0)
	var scheds []*store.Schedule
	for _, r := range []struct{ rule, start, zone string }{
		{"FREQ=MONTHLY", "2027-01-31T09:00", "Europe/Paris"},
		{"FREQ=WEEKLY;BYDAY=MO,FR", "2027-01-01T08:30", "America/New_York"},
		{"FREQ=DAILY", "2027-01-12T02:30", "America/New_York"},
		{"FREQ=MONTHLY;BYDAY=-1FR", "2026-12-01T17:00", "Australia/Lord_Howe"},
		{"FREQ=DAILY;INTERVAL=3;COUNT=20", "2027-01-11T00:00", "Asia/Tokyo"},
	} {
		for range 4 {
			scheds = append(scheds, createSchedule(t, db, c.now(), r.rule, r.start, r.zone, "SKIP_MISSED"))
		}
	}
	horizon := 10 * 24 * time.Hour
	p1, p2 := newPlanner(t, db, c, horizon), newPlanner(t, db, c, horizon)
	ctx := context.Background()
	for step := 0; step < 40; step++ {
		var wg sync.WaitGroup
		for _, p := range []*planner.Planner{p1, p2} {
			wg.Go(func() {
				for {
					n, err := p.Pass(ctx)
					if err != nil {
						t.Errorf("pass: %v", err)
						return
					}
					if n == 0 {
						return
					}
				}
			})
		}
		wg.Wait()
		c.add(3 * 24 * time.Hour)
	}
	until := c.now().Add(-3 * 24 * time.Hour).Add(horizon)
	for _, s := range scheds {
		keys, _ := made(t, db, s.ID)
		want := expected(t, s, day0, until)
		var got []string
		for k, n := range keys {
			if n != 1 {
				t.Errorf("schedule %s (%s): occurrence %s made %d times", s.ID, s.Rule, k, n)
			}
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("schedule %s (%s):\n made %v\n want %v", s.ID, s.Rule, got, want)
		}
	}
}

// failingCommit is a pool whose transactions fail at commit: a planner
// that dies after writing a batch and before committing it.
type failingCommit struct{ *pgxpool.Pool }

type failingTx struct{ pgx.Tx }

func (f failingCommit) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := f.Pool.Begin(ctx)
	return failingTx{tx}, err
}

func (f failingTx) Commit(ctx context.Context) error {
	_ = f.Tx.Rollback(ctx)
	return errors.New("planner killed before commit")
}

// TestPlannerCrashedMidBatchLeavesNoGapAndNoDuplicate: a pass that dies
// before its commit leaves the schedules as they were; the next planner's
// pass makes every occurrence once.
func TestPlannerCrashedMidBatchLeavesNoGapAndNoDuplicate(t *testing.T) {
	db := pgtest.NewPool(t)
	ensurePartitions(t, db, day0, day0.AddDate(0, 2, 0))
	c := &clock{}
	c.set(day0)
	s := createSchedule(t, db, c.now(), "FREQ=DAILY", "2027-01-10T18:00", "Europe/London", "SKIP_MISSED")
	ctx := context.Background()
	if _, err := newPlanner(t, failingCommit{db}, c, 5*24*time.Hour).Pass(ctx); err == nil {
		t.Fatal("the killed pass reported success")
	}
	if keys, _ := made(t, db, s.ID); len(keys) != 0 {
		t.Fatalf("a pass that never committed left %d occurrences", len(keys))
	}
	if _, err := newPlanner(t, db, c, 5*24*time.Hour).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	keys, _ := made(t, db, s.ID)
	want := expected(t, s, day0, day0.Add(5*24*time.Hour))
	if len(keys) != len(want) {
		t.Fatalf("made %v, want %v", keys, want)
	}
	for _, k := range want {
		if keys[k] != 1 {
			t.Fatalf("occurrence %s made %d times", k, keys[k])
		}
	}
}

// TestCatchUpAcrossAPause: a monthly plan paused across three occurrences
// and resumed: skip_missed makes none of them, latest_only the last, all
// every one (due at once); the next one is made on time either way. The
// occurrences made ahead before the pause are withdrawn by it.
func TestCatchUpAcrossAPause(t *testing.T) {
	db := pgtest.NewPool(t)
	ensurePartitions(t, db, day0, day0.AddDate(0, 8, 0))
	ctx := context.Background()
	for _, c := range []struct {
		policy string
		want   []string
	}{
		{"SKIP_MISSED", nil},
		{"LATEST_ONLY", []string{"2027-04-15T09:00:00"}},
		{"ALL", []string{"2027-02-15T09:00:00", "2027-03-15T09:00:00", "2027-04-15T09:00:00"}},
	} {
		t.Run(c.policy, func(t *testing.T) {
			clk := &clock{}
			clk.set(day0)
			s := createSchedule(t, db, clk.now(), "FREQ=MONTHLY", "2027-01-15T09:00", "UTC", c.policy)
			p := newPlanner(t, db, clk, 40*24*time.Hour)
			if _, err := p.Pass(ctx); err != nil {
				t.Fatal(err)
			}
			if keys, _ := made(t, db, s.ID); len(keys) != 2 { // Jan 15 and Feb 15 within 40 days
				t.Fatalf("before the pause: %v", keys)
			}
			clk.set(time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC)) // Jan 15 is past and charged, or not: left alone
			_, withdrawn, err := store.PauseSchedule(ctx, db, clk.now(), s.Payer, s.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			if withdrawn != 1 {
				t.Fatalf("the pause withdrew %d occurrences, want Feb 15's", withdrawn)
			}
			clk.set(time.Date(2027, 5, 1, 0, 0, 0, 0, time.UTC)) // Feb, Mar and Apr 15 passed paused
			if _, err := store.ResumeSchedule(ctx, db, clk.now(), s.Payer, s.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Pass(ctx); err != nil {
				t.Fatal(err)
			}
			keys, statuses := made(t, db, s.ID)
			var caught []string
			for k := range keys {
				if k > "2027-01-15T09:00:00" && k < "2027-05-01" {
					caught = append(caught, k)
				}
			}
			slices.Sort(caught)
			if !slices.Equal(caught, c.want) {
				t.Fatalf("caught up %v, want %v (statuses %v)", caught, c.want, statuses)
			}
			if keys["2027-05-15T09:00:00"] != 1 {
				t.Fatalf("the next occurrence after the resume: %v", keys)
			}
		})
	}
}

// TestWithdrawLeavesAClaimedOccurrenceAlone: a cancel that meets an
// occurrence a sweeper has claimed leaves it to run (its key kept), and
// withdraws the rest.
func TestWithdrawLeavesAClaimedOccurrenceAlone(t *testing.T) {
	db := pgtest.NewPool(t)
	ensurePartitions(t, db, day0, day0.AddDate(0, 2, 0))
	ctx := context.Background()
	clk := &clock{}
	clk.set(day0)
	s := createSchedule(t, db, clk.now(), "FREQ=DAILY", "2027-01-11T09:00", "UTC", "SKIP_MISSED")
	if _, err := newPlanner(t, db, clk, 5*24*time.Hour).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	// A sweeper claims the first (an operator ran it early).
	var claimed string
	if err := db.QueryRow(ctx, `UPDATE payments SET status = 'PROCESSING', attempt = 1, lease_owner = 'sweeper-t',
		lease_until = now() + interval '1 minute'
		WHERE schedule_id = $1 AND occurrence = '2027-01-11T09:00:00' RETURNING occurrence`, s.ID).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	_, withdrawn, err := store.CancelSchedule(ctx, db, clk.now(), s.Payer, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	keys, statuses := made(t, db, s.ID)
	if statuses[claimed] != "PROCESSING" || keys[claimed] != 1 {
		t.Fatalf("the claimed occurrence: %s (%v)", statuses[claimed], keys)
	}
	if withdrawn != 4 || len(keys) != 1 {
		t.Fatalf("withdrew %d, left %v", withdrawn, statuses)
	}
	got, err := store.GetSchedule(ctx, db, "", s.ID)
	if err != nil || got.State != store.ScheduleCancelled || got.LastOccurrence != claimed {
		t.Fatalf("after the cancel: %+v %v", got, err)
	}
	if _, _, err := store.PauseSchedule(ctx, db, clk.now(), s.Payer, s.ID, nil); !errors.Is(err, store.ErrScheduleState) {
		t.Fatalf("a pause of a cancelled schedule: %v", err)
	}
}

// TestPlaceSkipsWhatCameBeforeTheSchedule: a start in the past anchors
// the rule and charges nothing from before the schedule existed; a rule
// with nothing left is refused.
func TestPlaceSkipsWhatCameBeforeTheSchedule(t *testing.T) {
	r, _ := recurrence.ParseRule("FREQ=MONTHLY")
	plan := recurrence.Plan{Rule: r, Start: recurrence.Wall{Year: 2026, Month: 1, Day: 31, Hour: 9}, Zone: time.UTC}
	place, first, err := planner.Place(plan, day0)
	if err != nil || first.Nominal.String() != "2027-01-31T09:00:00" || place.LastOccurrence != "2026-12-31T09:00:00" || place.LastIndex != 12 {
		t.Fatalf("place %+v first %s: %v", place, first.Nominal, err)
	}
	r, _ = recurrence.ParseRule("FREQ=MONTHLY;COUNT=2")
	plan.Rule = r
	if _, _, err := planner.Place(plan, day0); !errors.Is(err, planner.ErrNoOccurrence) {
		t.Fatalf("a finished rule: %v", err)
	}
}

// lifeOf is a schedule's events, "KIND by actor", oldest first.
func lifeOf(t *testing.T, db pgdb.DB, id uuid.UUID) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT kind || ' by ' || actor FROM schedule_events WHERE schedule_id = $1 ORDER BY id`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAScheduleLivesAsEvents: each change of a schedule's life writes one
// event naming who made it (the payer, or the planner for a resume time
// come and an end), and the planner's progress writes none.
func TestAScheduleLivesAsEvents(t *testing.T) {
	db := pgtest.NewPool(t)
	ensurePartitions(t, db, day0, day0.AddDate(0, 6, 0))
	ctx := context.Background()
	clk := &clock{}
	clk.set(day0)
	s := createSchedule(t, db, clk.now(), "FREQ=MONTHLY;COUNT=5", "2027-01-15T09:00", "Europe/Paris", "SKIP_MISSED")
	other := createSchedule(t, db, clk.now(), "FREQ=WEEKLY", "2027-01-11T09:00", "UTC", "SKIP_MISSED")
	p := newPlanner(t, db, clk, 40*24*time.Hour)
	for range 3 {
		if _, err := p.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := lifeOf(t, db, s.ID); !slices.Equal(got, []string{"CREATED by payer"}) {
		t.Fatalf("after the planner's passes: %v", got)
	}
	clk.set(time.Date(2027, 1, 20, 0, 0, 0, 0, time.UTC))
	resume := time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	paused, _, err := store.PauseSchedule(ctx, db, clk.now(), s.Payer, s.ID, &resume)
	if err != nil {
		t.Fatal(err)
	}
	paused.Amount = 99000
	if _, _, err := store.UpdateSchedule(ctx, db, clk.now(), s.Payer, *paused); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.CancelSchedule(ctx, db, clk.now(), other.Payer, other.ID); err != nil {
		t.Fatal(err)
	}
	clk.set(resume.Add(24 * time.Hour))
	if _, err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	clk.set(time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC))
	if _, err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"CREATED by payer", "PAUSED by payer", "UPDATED by payer", "RESUMED by planner", "ENDED by planner"}
	if got := lifeOf(t, db, s.ID); !slices.Equal(got, want) {
		t.Errorf("the schedule's life: %v, want %v", got, want)
	}
	if got := lifeOf(t, db, other.ID); !slices.Equal(got, []string{"CREATED by payer", "CANCELLED by payer"}) {
		t.Errorf("the cancelled schedule's life: %v", got)
	}
	// A schedule whose rule has nothing left is made ENDED: both events.
	ended := store.Schedule{ID: uuid.New(), Payer: "payer-ended", Payee: "landlord", Amount: 100, Currency: "EUR", Rule: "FREQ=DAILY;COUNT=1",
		Start: "2027-01-01T09:00:00", Zone: "UTC", MonthEnd: "CLAMP", BusinessDays: "NONE", CatchUp: "SKIP_MISSED", CatchUpBound: 12}
	if _, _, err := store.CreateSchedule(ctx, db, ended); err != nil {
		t.Fatal(err)
	}
	if got := lifeOf(t, db, ended.ID); !slices.Equal(got, []string{"CREATED by payer", "ENDED by payer"}) {
		t.Errorf("a schedule made ended: %v", got)
	}
	var data string
	if err := db.QueryRow(ctx, `SELECT data::text FROM schedule_events WHERE schedule_id = $1 AND kind = 'UPDATED'`, s.ID).Scan(&data); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"amount": 99000`, `"state": "PAUSED"`, `"timeZone": "Europe/Paris"`, `"scheduleId": "` + s.ID.String()} {
		if !strings.Contains(data, w) {
			t.Errorf("the update's data %s lacks %s", data, w)
		}
	}
}

// TestAZoneRulesChangeRemakesWhatItMoves: occurrences made under other
// zone rules (their instants an hour off, as a tzdata release moving a
// DST date would leave them) are re-made at the instants this process
// reads, under the same keys; one a sweeper claimed and one an operator
// rescheduled are left alone, those that did not move are only stamped
// with this build's rules, and a second check does nothing.
func TestAZoneRulesChangeRemakesWhatItMoves(t *testing.T) {
	db := pgtest.NewPool(t)
	ensurePartitions(t, db, day0, day0.AddDate(0, 3, 0))
	ctx := context.Background()
	clk := &clock{}
	clk.set(day0)
	s := createSchedule(t, db, clk.now(), "FREQ=WEEKLY", "2027-01-11T09:00", "Europe/London", "SKIP_MISSED")
	p := newPlanner(t, db, clk, 40*24*time.Hour)
	if _, err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	occ, err := store.ScheduleOccurrences(ctx, db, s.ID, 100)
	if err != nil || len(occ) < 4 {
		t.Fatalf("made %d occurrences (%v)", len(occ), err)
	}
	// Each occurrence records the rules it was made with: a check finds
	// nothing to do.
	if n, err := p.CheckZones(ctx); err != nil || n != 0 {
		t.Fatalf("a check with the rules planned with: %d %v", n, err)
	}
	// Every occurrence as an older build made them; three of them an hour
	// later (its rules moved them). One of those has been claimed since,
	// one rescheduled by an operator.
	shifted, claimed, rescheduled := occ[0], occ[1], occ[2]
	if _, err := db.Exec(ctx, `UPDATE schedule_occurrences SET rules = 'older tzdata' WHERE schedule_id = $1`, s.ID); err != nil {
		t.Fatal(err)
	}
	for _, o := range []store.Occurrence{shifted, claimed, rescheduled} {
		for _, q := range []string{
			`UPDATE payments SET due_time = due_time + interval '1 hour', run_at = run_at + interval '1 hour' WHERE id = $1`,
			`UPDATE payment_index SET due_time = due_time + interval '1 hour' WHERE id = $1`,
			`UPDATE schedule_occurrences SET due_time = due_time + interval '1 hour' WHERE payment_id = $1`,
		} {
			if _, err := db.Exec(ctx, q, o.Payment); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.Exec(ctx, `UPDATE payments SET probe_first = true WHERE id = $1`, claimed.Payment); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE payments SET run_at = run_at + interval '2 hours' WHERE id = $1`, rescheduled.Payment); err != nil {
		t.Fatal(err)
	}
	n, err := p.CheckZones(ctx)
	if err != nil || n != 1 {
		t.Fatalf("re-made %d (%v), want the unclaimed shifted one", n, err)
	}
	after, err := store.ScheduleOccurrences(ctx, db, s.ID, 100)
	if err != nil || len(after) != len(occ) {
		t.Fatalf("after the re-plan: %d occurrences (%v), want %d", len(after), err, len(occ))
	}
	byKey := map[string]store.Occurrence{}
	for _, o := range after {
		byKey[o.Key] = o
	}
	if o := byKey[shifted.Key]; o.Payment == shifted.Payment || !o.DueAt.Equal(shifted.DueAt) {
		t.Errorf("the shifted occurrence: %+v, want a new payment due %s", o, shifted.DueAt)
	}
	for _, o := range []store.Occurrence{claimed, rescheduled} {
		if got := byKey[o.Key]; got.Payment != o.Payment || !got.DueAt.Equal(o.DueAt.Add(time.Hour)) {
			t.Errorf("a claimed or rescheduled occurrence was touched: %+v", got)
		}
	}
	var stamped int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM schedule_occurrences WHERE schedule_id = $1 AND rules <> 'older tzdata'`, s.ID).Scan(&stamped); err != nil ||
		stamped != len(occ)-2 {
		t.Errorf("%d occurrences carry this build's rules (%v), want all but the two left alone (%d)", stamped, err, len(occ)-2)
	}
	for _, o := range occ[3:] {
		if byKey[o.Key].Payment != o.Payment {
			t.Errorf("an occurrence that did not move was re-made: %s", o.Key)
		}
	}
	var st string
	if err := db.QueryRow(ctx, `SELECT status FROM payments WHERE id = $1`, shifted.Payment).Scan(&st); err != nil || st != "CANCELLED" {
		t.Errorf("the old payment of the re-made occurrence: %s %v", st, err)
	}
	if n, err := p.CheckZones(ctx); err != nil || n != 0 {
		t.Fatalf("a second check: %d %v", n, err)
	}
}
