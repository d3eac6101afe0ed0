package dbroles

import (
	"context"
	"fmt"
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
	if _, err := p.CheckZones(ctx); err != nil {
		t.Fatalf("the API role's check of the zone rules: %v", err)
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

	// An operator's change of a schedule is a request: the admin role asks
	// and decides, never changes a schedule nor applies a request; the API
	// role (its planner) applies an approved one and cannot approve.
	e.refused(t, "paysched_admin", `UPDATE schedules SET state = 'ACTIVE'`)
	var rid int64
	if err := e.pools["paysched_admin"].QueryRow(ctx, `INSERT INTO schedule_requests (action, schedule_id, reason, requested_by, requested_name, expires_at)
		VALUES ('RESUME', $1, 'payer asked', 'token:idp#ada', 'ada', now() + interval '1 hour') RETURNING id`, s.ID).Scan(&rid); err != nil {
		t.Fatalf("the admin role asks: %v", err)
	}
	where := fmt.Sprintf(` WHERE id = %d`, rid)
	e.refused(t, "paysched_api", `UPDATE schedule_requests SET state = 'APPROVED', decided_by = 'token:idp#bea'`+where)
	e.refused(t, "paysched_api", `UPDATE schedule_requests SET state = 'APPLIED'`+where) // not approved yet
	e.refused(t, "paysched_admin", `UPDATE schedule_requests SET state = 'APPLIED'`+where)
	e.refused(t, "paysched_admin", `UPDATE schedule_requests SET reason = 'something else'`+where)
	if _, err := e.pools["paysched_admin"].Exec(ctx, `UPDATE schedule_requests SET state = 'APPROVED', decided_by = 'token:idp#bea',
		decided_name = 'bea', decided_at = now()`+where); err != nil {
		t.Fatalf("the admin role approves: %v", err)
	}
	e.refused(t, "paysched_admin", `UPDATE schedule_requests SET state = 'APPLIED'`+where)
	e.refused(t, "paysched_admin", `UPDATE schedule_requests SET decided_by = 'token:idp#cy'`+where)
	if n, err := store.ApplyScheduleRequests(ctx, api, now, 10); err != nil || n != 1 {
		t.Fatalf("the API role applies the approved request: %d %v", n, err)
	}
	var st, state string
	if err := e.admin.QueryRow(ctx, `SELECT r.state, s.state FROM schedule_requests r JOIN schedules s ON s.id = r.schedule_id`+
		` WHERE r.id = $1`, rid).Scan(&st, &state); err != nil || st != "APPLIED" || state != "ACTIVE" {
		t.Fatalf("after its application: request %s, schedule %s (%v)", st, state, err)
	}
}
