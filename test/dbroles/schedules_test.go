package dbroles

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/store"
)

// TestTheAPIRolePlansSchedules: payments-api's role runs the whole
// schedule life, the planner's pass included (its payments are created as
// the client), and a pause's withdrawal (the client's cancel); the
// engine's roles cannot make an occurrence, nor touch a schedule.
func TestTheAPIRolePlansSchedules(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	api := e.pools["paysched_api"]
	now := time.Now()
	if _, err := store.EnsurePartitions(ctx, e.admin, now.AddDate(0, 0, -1), now.AddDate(0, 0, 12)); err != nil {
		t.Fatal(err)
	}
	s := store.Schedule{ID: uuid.New(), Payer: "rita", Payee: "landlord", Amount: 100, Currency: "EUR", Rule: "FREQ=DAILY",
		Start: now.UTC().Add(time.Hour).Format("2006-01-02T15:04:05"), Zone: "UTC", MonthEnd: "CLAMP", BusinessDays: "NONE",
		CatchUp: "SKIP_MISSED", CatchUpBound: 12, IdempotencyKey: "k1"}
	plan, err := planner.Plan(&s)
	if err != nil {
		t.Fatal(err)
	}
	place, _, err := planner.Place(plan, now)
	if err != nil {
		t.Fatal(err)
	}
	s.NextAt = place.NextAt
	if _, _, err := store.CreateSchedule(ctx, api, s); err != nil {
		t.Fatalf("the API role creates a schedule: %v", err)
	}
	p, err := planner.New(planner.Config{Horizon: 5 * 24 * time.Hour, Interval: time.Second, Batch: 10, Grace: time.Hour},
		api, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := p.Pass(ctx); err != nil || n != 1 {
		t.Fatalf("the API role's planner pass: %d %v", n, err)
	}
	var made int
	if err := e.admin.QueryRow(ctx, `SELECT count(*) FROM payments WHERE schedule_id = $1`, s.ID).Scan(&made); err != nil || made < 4 {
		t.Fatalf("made %d occurrences (%v)", made, err)
	}
	if _, n, err := store.PauseSchedule(ctx, api, now, "rita", s.ID, nil); err != nil || n != made {
		t.Fatalf("the API role's pause withdrew %d of %d: %v", n, made, err)
	}
	for _, role := range []string{"paysched_sweeper", "paysched_executor", "paysched_reaper", "paysched_reconciler", "paysched_cdc"} {
		e.refused(t, role, `INSERT INTO schedule_occurrences (schedule_id, occurrence, idx, payment_id, due_time)
			VALUES ('`+s.ID.String()+`', 'x', 1, gen_random_uuid(), now())`)
		e.refused(t, role, `UPDATE schedules SET amount_minor = 1`)
	}
	// A schedule's events are the database's: the role that changes
	// schedules wrote two (created, paused) through them, and no role
	// writes, changes or removes one by itself.
	var events int
	if err := e.admin.QueryRow(ctx, `SELECT count(*) FROM schedule_events WHERE schedule_id = $1`, s.ID).Scan(&events); err != nil || events != 2 {
		t.Fatalf("%d schedule events (%v), want created and paused", events, err)
	}
	for _, role := range []string{"paysched_api", "paysched_admin", "paysched_cdc", "paysched_audit"} {
		e.refused(t, role, `INSERT INTO schedule_events (schedule_id, tenant, kind, actor, data)
			VALUES ('`+s.ID.String()+`', '', 'RESUMED', 'payer', '{}')`)
		e.refused(t, role, `UPDATE schedule_events SET actor = 'someone'`)
		e.refused(t, role, `DELETE FROM schedule_events`)
	}
	e.refused(t, "paysched_api", `SELECT paysched_schedule_event()`)
}
