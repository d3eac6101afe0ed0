package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// ScheduleState is where a schedule stands.
type ScheduleState string

// The schedule states.
const (
	// ScheduleActive: the planner makes its occurrences ahead.
	ScheduleActive ScheduleState = "ACTIVE"
	// SchedulePaused: no occurrence is made until it is resumed (by hand,
	// or at its resume time); what was missed meanwhile follows its
	// catch-up policy.
	SchedulePaused ScheduleState = "PAUSED"
	// ScheduleEnded: its rule has no more occurrences (COUNT, UNTIL).
	ScheduleEnded ScheduleState = "ENDED"
	// ScheduleCancelled: the payer cancelled it; no occurrence is made.
	ScheduleCancelled ScheduleState = "CANCELLED"
)

// Schedule is one row of schedules.
type Schedule struct {
	ID          uuid.UUID
	Tenant      string
	Payer       string
	Payee       string
	Amount      int64
	Currency    string
	Description string
	Metadata    map[string]string
	// Rule, Start (local, YYYY-MM-DDTHH:MM:SS) and Zone are the plan's
	// time; MonthEnd, BusinessDays, Calendar, CatchUp and CatchUpBound its
	// policies, as pkg/recurrence spells them in the API.
	Rule, Start, Zone                string
	MonthEnd, BusinessDays, Calendar string
	CatchUp                          string
	CatchUpBound                     int
	State                            ScheduleState
	ResumeAt                         *time.Time
	LastOccurrence                   string
	LastIndex                        int
	NextAt                           *time.Time
	IdempotencyKey                   string
	RequestHash                      []byte
	CreatedAt, UpdatedAt             time.Time
	// Seq orders a payer's schedules for listing (newest highest).
	Seq int64
}

// ErrScheduleKeyReused means the payer's idempotency key was used for a
// schedule with other fields.
var ErrScheduleKeyReused = errors.New("idempotency key reused for another schedule")

// ErrScheduleState means the schedule is not in a state the change may leave.
var ErrScheduleState = errors.New("schedule not in a state that allows it")

const scheduleCols = `id, tenant, payer, payee, amount_minor, currency, description, metadata, rrule, start_local, time_zone,
       month_end, business_days, calendar, catch_up, catch_up_bound, state, resume_at, coalesce(last_occurrence, ''),
       last_index, next_at, coalesce(idempotency_key, ''), request_hash, created_at, updated_at, seq`

func scanSchedule(row pgx.Row) (*Schedule, error) {
	var s Schedule
	var meta []byte
	if err := row.Scan(&s.ID, &s.Tenant, &s.Payer, &s.Payee, &s.Amount, &s.Currency, &s.Description, &meta, &s.Rule, &s.Start,
		&s.Zone, &s.MonthEnd, &s.BusinessDays, &s.Calendar, &s.CatchUp, &s.CatchUpBound, &s.State, &s.ResumeAt,
		&s.LastOccurrence, &s.LastIndex, &s.NextAt, &s.IdempotencyKey, &s.RequestHash, &s.CreatedAt, &s.UpdatedAt, &s.Seq); err != nil {
		return nil, err
	}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &s.Metadata); err != nil {
			return nil, fmt.Errorf("decode metadata of schedule %s: %w", s.ID, err)
		}
	}
	s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	return &s, nil
}

// createScheduleSQL writes a schedule, unless the payer's idempotency key
// already names one (then nothing: CreateSchedule reads that one).
const createScheduleSQL = `
INSERT INTO schedules (id, tenant, payer, payee, amount_minor, currency, description, metadata, rrule, start_local,
                       time_zone, month_end, business_days, calendar, catch_up, catch_up_bound, next_at,
                       idempotency_key, request_hash, state, last_occurrence, last_index)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11, $12, $13, $14, $15, $16, $17, nullif($18, ''), $19,
        CASE WHEN $17::timestamptz IS NULL THEN 'ENDED' ELSE 'ACTIVE' END, nullif($20, ''), $21)
ON CONFLICT (payer, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING ` + scheduleCols

const scheduleByKeySQL = `SELECT ` + scheduleCols + ` FROM schedules WHERE payer = $1 AND idempotency_key = $2`

// CreateSchedule writes s (its NextAt the first occurrence's instant, nil
// when the rule makes none; its LastOccurrence and LastIndex the place
// planning starts after), or, when the payer's key names a schedule
// already, returns that one with replay true; a key reused with another
// request hash is ErrScheduleKeyReused.
func CreateSchedule(ctx context.Context, db pgdb.DB, s Schedule) (_ *Schedule, replay bool, err error) {
	meta, err := metadataJSON(s.Metadata)
	if err != nil {
		return nil, false, err
	}
	if s.Tenant == "" {
		s.Tenant = DefaultTenant // its occurrences are shared among tenants as a payment without one is
	}
	got, err := scanSchedule(db.QueryRow(ctx, createScheduleSQL, s.ID, s.Tenant, s.Payer, s.Payee, s.Amount, s.Currency,
		s.Description, string(meta), s.Rule, s.Start, s.Zone, s.MonthEnd, s.BusinessDays, s.Calendar, s.CatchUp, s.CatchUpBound,
		s.NextAt, s.IdempotencyKey, s.RequestHash, s.LastOccurrence, s.LastIndex))
	if err == nil {
		return got, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("create schedule: %w", err)
	}
	got, err = scanSchedule(db.QueryRow(ctx, scheduleByKeySQL, s.Payer, s.IdempotencyKey))
	if err != nil {
		return nil, false, fmt.Errorf("read schedule by key: %w", err)
	}
	if !bytes.Equal(got.RequestHash, s.RequestHash) {
		return nil, false, ErrScheduleKeyReused
	}
	return got, true, nil
}

const getScheduleSQL = `SELECT ` + scheduleCols + ` FROM schedules WHERE id = $1 AND ($2 = '' OR payer = $2)`

// GetSchedule reads payer's schedule (any payer's when payer is empty), or
// ErrNotFound.
func GetSchedule(ctx context.Context, db pgdb.DB, payer string, id uuid.UUID) (*Schedule, error) {
	s, err := scanSchedule(db.QueryRow(ctx, getScheduleSQL, id, payer))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get schedule: %w", err)
	}
	return s, nil
}

// listSchedulesSQL pages through a payer's schedules, newest first, before
// the seq of the last one read (0: from the newest).
const listSchedulesSQL = `
SELECT ` + scheduleCols + ` FROM schedules
WHERE payer = $1 AND ($2 = 0 OR seq < $2)
ORDER BY seq DESC LIMIT $3`

// ListSchedules is a page of payer's schedules, newest first, before seq
// before (0: from the newest).
func ListSchedules(ctx context.Context, db pgdb.DB, payer string, before int64, limit int) ([]Schedule, error) {
	rows, err := db.Query(ctx, listSchedulesSQL, payer, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *s)
	}
	return out, rows.Err()
}

// pauseSQL, cancelScheduleSQL and resumeSQL move a schedule between
// states, from the ones each allows only, and lock its row for the rest of
// the transaction. A resume asks the planner to look at it at once
// (next_at now): what it missed meanwhile follows its catch-up policy.
const (
	pauseSQL = `
UPDATE schedules SET state = 'PAUSED', resume_at = $3, updated_at = now()
WHERE id = $1 AND ($2 = '' OR payer = $2) AND state = 'ACTIVE'
RETURNING ` + scheduleCols
	cancelScheduleSQL = `
UPDATE schedules SET state = 'CANCELLED', resume_at = NULL, next_at = NULL, updated_at = now()
WHERE id = $1 AND ($2 = '' OR payer = $2) AND state IN ('ACTIVE', 'PAUSED')
RETURNING ` + scheduleCols
	resumeSQL = `
UPDATE schedules SET state = 'ACTIVE', resume_at = NULL, next_at = $3, updated_at = now()
WHERE id = $1 AND ($2 = '' OR payer = $2) AND state = 'PAUSED'
RETURNING ` + scheduleCols
)

// withdrawSQL cancels a schedule's occurrences made ahead and not yet due,
// and releases their keys, so a resume makes them again.
//
// Why it is safe: each payment is cancelled as the payer's cancel is, from
// PENDING only and not probe_first, on its own partition (due_time), so a
// claimed one, or one an earlier attempt may have charged, is left to run;
// only the keys of payments this statement cancelled are released, in the
// same statement, so no key is freed whose payment may still charge.
const withdrawSQL = `
WITH made AS (
    SELECT occurrence, payment_id, due_time FROM schedule_occurrences WHERE schedule_id = $1 AND due_time > $2
), cancelled AS (
    UPDATE payments p SET status = 'CANCELLED', updated_at = now()
    FROM made m
    WHERE p.id = m.payment_id AND p.due_time = m.due_time AND p.status = 'PENDING' AND NOT p.probe_first
    RETURNING m.occurrence
)
DELETE FROM schedule_occurrences o USING cancelled c
WHERE o.schedule_id = $1 AND o.occurrence = c.occurrence`

// placeSQL moves a schedule's place back to its latest occurrence still
// made, after a withdrawal (keys sort as the nominal times do).
const placeSQL = `
UPDATE schedules s SET last_occurrence = l.occurrence, last_index = coalesce(l.idx, 0)
FROM (SELECT NULL) AS one
LEFT JOIN LATERAL (SELECT occurrence, idx FROM schedule_occurrences WHERE schedule_id = $1
                   ORDER BY occurrence DESC LIMIT 1) l ON true
WHERE s.id = $1`

// PauseSchedule pauses payer's active schedule until resumeAt (nil: until
// resumed), withdrawing the occurrences made ahead (due after now); CancelSchedule ends an
// active or paused one for good, withdrawing them too. Each returns the
// schedule and how many occurrences it withdrew; ErrNotFound when there
// is no such schedule, ErrScheduleState (with the schedule as it stands)
// when it is in no state the change may leave.
func PauseSchedule(ctx context.Context, db pgdb.DB, now time.Time, payer string, id uuid.UUID, resumeAt *time.Time) (*Schedule, int, error) {
	return withdraw(ctx, db, now, payer, id, pauseSQL, true, resumeAt)
}

// CancelSchedule ends payer's active or paused schedule for good; see
// PauseSchedule.
func CancelSchedule(ctx context.Context, db pgdb.DB, now time.Time, payer string, id uuid.UUID) (*Schedule, int, error) {
	return withdraw(ctx, db, now, payer, id, cancelScheduleSQL, true)
}

// withdraw changes a schedule with sql (its $1 the id, $2 the payer, then
// args) and withdraws what was made ahead of now, in one transaction;
// placeBack moves its place back to its latest occurrence still made (an
// update sets a place of its own).
func withdraw(ctx context.Context, db pgdb.DB, now time.Time, payer string, id uuid.UUID, sql string, placeBack bool,
	args ...any) (*Schedule, int, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx)
	s, err := scanSchedule(tx.QueryRow(ctx, sql, append([]any{id, payer}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, err := notInState(ctx, db, payer, id)
		return cur, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("change schedule state: %w", err)
	}
	tag, err := tx.Exec(ctx, withdrawSQL, id, now)
	if err != nil {
		return nil, 0, fmt.Errorf("withdraw occurrences: %w", err)
	}
	if placeBack {
		if _, err := tx.Exec(ctx, placeSQL, id); err != nil {
			return nil, 0, fmt.Errorf("move place back: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, 0, fmt.Errorf("commit: %w", err)
	}
	return s, int(tag.RowsAffected()), nil
}

// updateScheduleSQL replaces an active or paused schedule's payment and
// plan, and sets its place to the new plan's (the occurrences before now
// are behind it, none is caught up); its row stays locked for the rest of
// the transaction.
const updateScheduleSQL = `
UPDATE schedules SET payee = $3, amount_minor = $4, currency = $5, description = $6, metadata = $7::jsonb, rrule = $8,
       start_local = $9, time_zone = $10, month_end = $11, business_days = $12, calendar = $13, catch_up = $14,
       catch_up_bound = $15, last_occurrence = nullif($16, ''), last_index = $17,
       next_at = CASE WHEN state = 'ACTIVE' THEN $18 ELSE now() END, updated_at = now()
WHERE id = $1 AND ($2 = '' OR payer = $2) AND state IN ('ACTIVE', 'PAUSED')
RETURNING ` + scheduleCols

// UpdateSchedule replaces payer's active or paused schedule's payment and
// plan with s's (its place the new plan's from now), and withdraws the
// occurrences made ahead under the old ones (fenced as a pause's: one a
// sweeper claimed goes ahead), so the planner makes them again as they now
// read. It returns the schedule and how many it withdrew; ErrNotFound and
// ErrScheduleState as PauseSchedule.
func UpdateSchedule(ctx context.Context, db pgdb.DB, now time.Time, payer string, s Schedule) (*Schedule, int, error) {
	meta, err := metadataJSON(s.Metadata)
	if err != nil {
		return nil, 0, err
	}
	return withdraw(ctx, db, now, payer, s.ID, updateScheduleSQL, false, s.Payee, s.Amount, s.Currency, s.Description,
		string(meta), s.Rule, s.Start, s.Zone, s.MonthEnd, s.BusinessDays, s.Calendar, s.CatchUp, s.CatchUpBound,
		s.LastOccurrence, s.LastIndex, s.NextAt)
}

// notInState answers a change that found payer's schedule in no state it
// may leave: the schedule as it stands and ErrScheduleState, or
// ErrNotFound.
func notInState(ctx context.Context, db pgdb.DB, payer string, id uuid.UUID) (*Schedule, error) {
	cur, err := GetSchedule(ctx, db, payer, id)
	if err != nil {
		return nil, err
	}
	return cur, ErrScheduleState
}

// metadataJSON is a schedule's metadata as stored: an object, {} for none.
func metadataJSON(m map[string]string) ([]byte, error) {
	if m == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	return b, nil
}

// ResumeSchedule resumes payer's paused schedule, to be planned from now
// (ErrNotFound, ErrScheduleState as PauseSchedule).
func ResumeSchedule(ctx context.Context, db pgdb.DB, now time.Time, payer string, id uuid.UUID) (*Schedule, error) {
	s, err := scanSchedule(db.QueryRow(ctx, resumeSQL, id, payer, now))
	if errors.Is(err, pgx.ErrNoRows) {
		return notInState(ctx, db, payer, id)
	}
	if err != nil {
		return nil, fmt.Errorf("resume schedule: %w", err)
	}
	return s, nil
}

// dueSchedulesSQL takes the schedules the planner has work on: active ones
// whose next occurrence falls due within the horizon, and paused ones
// whose resume time has come. SKIP LOCKED gives two planners disjoint
// schedules; the lock is held until the planner's transaction ends, so a
// schedule's occurrences and its place move together or not at all.
const dueSchedulesSQL = `
SELECT ` + scheduleCols + ` FROM schedules
WHERE (state = 'ACTIVE' AND next_at <= $1) OR (state = 'PAUSED' AND resume_at <= $2)
ORDER BY next_at NULLS FIRST
LIMIT $3
FOR UPDATE SKIP LOCKED`

// DueSchedules locks and returns up to limit schedules with occurrences
// to make before horizon, or resuming by now. db must be a transaction.
func DueSchedules(ctx context.Context, tx pgx.Tx, now, horizon time.Time, limit int) ([]Schedule, error) {
	rows, err := tx.Query(ctx, dueSchedulesSQL, horizon, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *s)
	}
	return out, rows.Err()
}

// Occurrence is one payment a planner makes for a schedule.
type Occurrence struct {
	Schedule uuid.UUID
	// Key is the nominal local date and time (pkg/recurrence's Wall).
	Key string
	// Index is its index in the rule.
	Index int
	// Payment is the id the payment gets.
	Payment uuid.UUID
	// DueAt is when it is charged.
	DueAt time.Time
	// Rules is the fingerprint of the zone rules DueAt was read with
	// (recurrence.ZoneRules; empty: unknown).
	Rules string
}

// makeOccurrencesSQL writes occurrence payments: a schedule_occurrences
// row, the payment_index row and the payment, with the schedule's fields
// as they are now (a change of amount applies to what is made after it).
//
// Why it is safe: the occurrence's key row, its index row and its payment
// are written by one statement, so all or none exist; ON CONFLICT on the
// key's primary key makes an occurrence already made (by another planner,
// or before a crash whose transaction did commit) write nothing, and only
// the rows whose key was new (RETURNING) become payments. Rows go in key
// order so two overlapping batches lock keys in the same order. The
// payments are PENDING and untouched, created as the client, which the
// payment guard requires of every insert.
const makeOccurrencesSQL = `
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::timestamptz[], $5::int[], $6::text[])
        AS t(schedule_id, occurrence, id, due_time, idx, rules)
), occ AS (
    INSERT INTO schedule_occurrences (schedule_id, occurrence, payment_id, due_time, idx, rules)
    SELECT schedule_id, occurrence, id, due_time, idx, nullif(rules, '') FROM input ORDER BY schedule_id, occurrence
    ON CONFLICT (schedule_id, occurrence) DO NOTHING
    RETURNING payment_id
), src AS (
    SELECT i.id, i.schedule_id, i.occurrence, i.due_time, s.payer, s.payee, s.amount_minor, s.currency,
           s.description, s.metadata, s.tenant
    FROM input i JOIN occ ON occ.payment_id = i.id JOIN schedules s ON s.id = i.schedule_id
), idx AS (
    INSERT INTO payment_index (id, payer, payee, due_time, created_at, tenant, currency, amount_minor)
    SELECT id, payer, payee, due_time, now(), tenant, currency, amount_minor FROM src
    RETURNING id
)
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status, description, metadata,
                      created_at, updated_at, tenant, schedule_id, occurrence)
SELECT s.id, s.payer, s.payee, s.amount_minor, s.currency, s.due_time, s.due_time, 'PENDING', s.description, s.metadata,
       now(), now(), s.tenant, s.schedule_id, s.occurrence
FROM src s JOIN idx USING (id)
RETURNING id`

// MakeOccurrences writes the occurrences not made already, and returns
// how many it made.
func MakeOccurrences(ctx context.Context, db pgdb.DB, os []Occurrence) (int, error) {
	if len(os) == 0 {
		return 0, nil
	}
	scheds, keys, ids, dues, idxs, rules := make([]uuid.UUID, len(os)), make([]string, len(os)), make([]uuid.UUID, len(os)),
		make([]time.Time, len(os)), make([]int32, len(os)), make([]string, len(os))
	for i, o := range os {
		scheds[i], keys[i], ids[i], dues[i], idxs[i], rules[i] = o.Schedule, o.Key, o.Payment, o.DueAt, int32(o.Index), o.Rules
	}
	tag, err := db.Exec(ctx, makeOccurrencesSQL, scheds, keys, ids, dues, idxs, rules)
	if err != nil {
		return 0, fmt.Errorf("make occurrences: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Planned is where a schedule's planning stands after a planner's pass.
type Planned struct {
	Schedule       uuid.UUID
	LastOccurrence string
	LastIndex      int
	// NextAt is the next occurrence's instant (nil: the rule has ended).
	NextAt *time.Time
	// State is ACTIVE, or ENDED once the rule has no more.
	State ScheduleState
}

// setPlannedSQL moves schedules' places. The planner holds each row's lock
// (DueSchedules), so nothing moved them meanwhile; a schedule paused or
// cancelled since is not locked by it and so not among them. The
// statement names the planner as the actor of the schedule events it
// causes (an end; a pause's resume time come): the setting is local to
// the planner's transaction, and the events' trigger reads it at the
// statement's end.
const setPlannedSQL = `
WITH actor AS (SELECT set_config('paysched.actor', 'planner', true) AS who)
UPDATE schedules s SET last_occurrence = nullif(p.last_occurrence, ''), last_index = p.last_index, next_at = p.next_at,
       state = p.state, resume_at = CASE WHEN p.state = 'ACTIVE' THEN NULL ELSE s.resume_at END, updated_at = now()
FROM actor, unnest($1::uuid[], $2::text[], $3::int[], $4::timestamptz[], $5::text[]) AS p(id, last_occurrence, last_index, next_at, state)
WHERE s.id = p.id AND actor.who = 'planner'`

// SetPlanned records where each schedule's planning stands.
func SetPlanned(ctx context.Context, db pgdb.DB, ps []Planned) error {
	if len(ps) == 0 {
		return nil
	}
	ids, lasts, idxs, nexts, states := make([]uuid.UUID, len(ps)), make([]string, len(ps)), make([]int32, len(ps)),
		make([]*time.Time, len(ps)), make([]string, len(ps))
	for i, p := range ps {
		ids[i], lasts[i], idxs[i], nexts[i], states[i] = p.Schedule, p.LastOccurrence, int32(p.LastIndex), p.NextAt, string(p.State)
	}
	if _, err := db.Exec(ctx, setPlannedSQL, ids, lasts, idxs, nexts, states); err != nil {
		return fmt.Errorf("set planned: %w", err)
	}
	return nil
}

// scheduleOccurrencesSQL lists a schedule's occurrences made, newest
// first, with their payments' status.
const scheduleOccurrencesSQL = `
SELECT o.occurrence, o.idx, o.payment_id, o.due_time
FROM schedule_occurrences o WHERE o.schedule_id = $1
ORDER BY o.occurrence DESC LIMIT $2`

// ScheduleOccurrences are up to limit of a schedule's occurrences made,
// newest first.
func ScheduleOccurrences(ctx context.Context, db pgdb.DB, id uuid.UUID, limit int) ([]Occurrence, error) {
	rows, err := db.Query(ctx, scheduleOccurrencesSQL, id, limit)
	if err != nil {
		return nil, fmt.Errorf("schedule occurrences: %w", err)
	}
	defer rows.Close()
	var out []Occurrence
	for rows.Next() {
		o := Occurrence{Schedule: id}
		if err := rows.Scan(&o.Key, &o.Index, &o.Payment, &o.DueAt); err != nil {
			return nil, err
		}
		o.DueAt = o.DueAt.UTC()
		out = append(out, o)
	}
	return out, rows.Err()
}

// allSchedulesSQL and tenantSchedulesSQL page through every payer's
// schedules for the console, newest first, in a state (” for any): the
// first down schedules_seq_idx, the second down one tenant's range of
// schedules_tenant_seq_idx.
const (
	allSchedulesSQL = `
SELECT ` + scheduleCols + ` FROM schedules
WHERE seq < $1 AND ($2 = '' OR state = $2)
ORDER BY seq DESC LIMIT $3`
	tenantSchedulesSQL = `
SELECT ` + scheduleCols + ` FROM schedules
WHERE tenant = $4 AND seq < $1 AND ($2 = '' OR state = $2)
ORDER BY tenant, seq DESC LIMIT $3`
)

// AllSchedules is a page of every payer's schedules (the operators'
// view), newest first, before seq before (0: from the newest), in state
// and tenant when given.
func AllSchedules(ctx context.Context, db pgdb.DB, before int64, state ScheduleState, tenant string, limit int) ([]Schedule, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	sql, args := allSchedulesSQL, []any{before, string(state), limit}
	if tenant != "" {
		sql, args = tenantSchedulesSQL, append(args, tenant)
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list all schedules: %w", err)
	}
	return collectSchedules(rows)
}

func collectSchedules(rows pgx.Rows) ([]Schedule, error) {
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		s, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *s)
	}
	return out, rows.Err()
}

// activeSchedulesSQL walks the active schedules by id, for the forecast.
const activeSchedulesSQL = `
SELECT ` + scheduleCols + ` FROM schedules
WHERE state = 'ACTIVE' AND id > $1 ORDER BY id LIMIT $2`

// ActiveSchedules is a page of the active schedules after id after (the
// nil uuid: from the first), in id order.
func ActiveSchedules(ctx context.Context, db pgdb.DB, after uuid.UUID, limit int) ([]Schedule, error) {
	rows, err := db.Query(ctx, activeSchedulesSQL, after, limit)
	if err != nil {
		return nil, fmt.Errorf("active schedules: %w", err)
	}
	return collectSchedules(rows)
}

// MadeOccurrence is an occurrence made, with its payment as it stands.
type MadeOccurrence struct {
	Occurrence
	// Status is its payment's status ('' when the payment is gone to
	// retention).
	Status string
}

// scheduleHistorySQL is a schedule's occurrences made, newest first, with
// their payments' status (each payment found by its id and due time, so
// one partition is read per row).
const scheduleHistorySQL = `
SELECT o.occurrence, o.idx, o.payment_id, o.due_time, coalesce(p.status, '')
FROM schedule_occurrences o
LEFT JOIN payments p ON p.id = o.payment_id AND p.due_time = o.due_time
WHERE o.schedule_id = $1
ORDER BY o.occurrence DESC LIMIT $2`

// ScheduleHistory is up to limit of a schedule's occurrences made, newest
// first, with their payments' status.
func ScheduleHistory(ctx context.Context, db pgdb.DB, id uuid.UUID, limit int) ([]MadeOccurrence, error) {
	rows, err := db.Query(ctx, scheduleHistorySQL, id, limit)
	if err != nil {
		return nil, fmt.Errorf("schedule history: %w", err)
	}
	defer rows.Close()
	var out []MadeOccurrence
	for rows.Next() {
		o := MadeOccurrence{Occurrence: Occurrence{Schedule: id}}
		if err := rows.Scan(&o.Key, &o.Index, &o.Payment, &o.DueAt, &o.Status); err != nil {
			return nil, fmt.Errorf("schedule history: %w", err)
		}
		o.DueAt = o.DueAt.UTC()
		out = append(out, o)
	}
	return out, rows.Err()
}

// ScheduleEvent is one change of a schedule's life (schedule_events).
type ScheduleEvent struct {
	ID    int64
	Kind  string
	Actor string
	At    time.Time
}

// ScheduleEvents is up to limit of a schedule's events, newest first.
func ScheduleEvents(ctx context.Context, db pgdb.DB, id uuid.UUID, limit int) ([]ScheduleEvent, error) {
	rows, err := db.Query(ctx, `SELECT id, kind, actor, at FROM schedule_events WHERE schedule_id = $1 ORDER BY id DESC LIMIT $2`, id, limit)
	if err != nil {
		return nil, fmt.Errorf("schedule events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ScheduleEvent])
	if err != nil {
		return nil, fmt.Errorf("schedule events: %w", err)
	}
	return out, nil
}

// pendingByWeekSQL is what is made and still to run, per week from $1
// (week 0 starts then) and currency, for $2 weeks: a range of the sweep
// index (PENDING rows by run_at), bounded by due time for partition
// pruning ($3).
const pendingByWeekSQL = `
SELECT floor(extract(epoch FROM run_at - $1::timestamptz) / 604800)::int AS w, currency, count(*), sum(amount_minor)::bigint
FROM payments
WHERE status = 'PENDING' AND run_at >= $1::timestamptz AND run_at < $1::timestamptz + make_interval(weeks => $2) AND due_time <= $3
GROUP BY 1, 2`

// PendingWeek is what falls due in one week from a start, in one currency.
type PendingWeek struct {
	// Week is the week's number from the start (0: the first 7 days).
	Week     int
	Currency string
	Count    int64
	Amount   int64
}

// PendingByWeek is the PENDING payments per week from from, for weeks
// weeks, and currency.
func PendingByWeek(ctx context.Context, db pgdb.DB, from time.Time, weeks int) ([]PendingWeek, error) {
	rows, err := db.Query(ctx, pendingByWeekSQL, from, weeks, DueBound(from.Add(time.Duration(weeks)*7*24*time.Hour)))
	if err != nil {
		return nil, fmt.Errorf("pending by week: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PendingWeek])
	if err != nil {
		return nil, fmt.Errorf("pending by week: %w", err)
	}
	return out, nil
}

// nextApprovedSQL takes the oldest approved operator request on a
// schedule still in time, locked: two planners never apply one twice.
const nextApprovedSQL = `
SELECT id, action, schedule_id, resume_at, requested_name, decided_name FROM schedule_requests
WHERE state = 'APPROVED' AND expires_at > now()
ORDER BY id LIMIT 1
FOR UPDATE SKIP LOCKED`

// ApplyScheduleRequests applies up to limit operator requests a second
// admin approved (schedule_requests: a pause, resume or cancel of a
// payer's schedule), each in a transaction of its own, and returns how
// many it applied or found too late. The schedule's event names both
// operators; a schedule that moved meanwhile (cancelled by its payer, or
// resumed already) leaves its request NOT_APPLIED, with why.
//
// Why it is safe: it runs as payments-api's role, the one that changes
// schedules and withdraws their occurrences (as the payer's own pause
// does: the same statements, fenced the same way); the request is locked
// and moved out of APPROVED in the transaction that applies it, so it is
// applied once, and the database lets this role move a request only from
// APPROVED to APPLIED or NOT_APPLIED.
func ApplyScheduleRequests(ctx context.Context, db pgdb.DB, now time.Time, limit int) (int, error) {
	n := 0
	for ; n < limit; n++ {
		done, err := applyScheduleRequest(ctx, db, now)
		if err != nil {
			return n, err
		}
		if !done {
			break
		}
	}
	return n, nil
}

func applyScheduleRequest(ctx context.Context, db pgdb.DB, now time.Time) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit it does nothing
	var (
		id                  int64
		action              string
		sched               uuid.UUID
		resumeAt            *time.Time
		requester, approver string
	)
	err = tx.QueryRow(ctx, nextApprovedSQL).Scan(&id, &action, &sched, &resumeAt, &requester, &approver)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("next approved schedule request: %w", err)
	}
	actor := "admin:" + requester + ", approved by " + approver
	if _, err := tx.Exec(ctx, `SELECT set_config('paysched.actor', $1, true)`, actor); err != nil {
		return false, fmt.Errorf("name the actor: %w", err)
	}
	withdrawn := 0
	switch action {
	case "PAUSE":
		_, withdrawn, err = PauseSchedule(ctx, tx, now, "", sched, resumeAt)
	case "CANCEL":
		_, withdrawn, err = CancelSchedule(ctx, tx, now, "", sched)
	case "RESUME":
		_, err = ResumeSchedule(ctx, tx, now, "", sched)
	default:
		err = fmt.Errorf("unknown action %q", action)
	}
	state, why := "APPLIED", ""
	switch {
	case errors.Is(err, ErrScheduleState):
		cur, _ := GetSchedule(ctx, tx, "", sched)
		state, why = "NOT_APPLIED", "the schedule had moved meanwhile"
		if cur != nil {
			why = "the schedule is " + string(cur.State) + " now"
		}
	case errors.Is(err, ErrNotFound):
		state, why = "NOT_APPLIED", "the schedule is gone"
	case err != nil:
		// Not a state it can explain: closed as NOT_APPLIED with the error,
		// so one request that cannot apply does not stop the ones after it.
		_ = tx.Rollback(ctx)
		if _, cerr := db.Exec(ctx, `UPDATE schedule_requests SET state = 'NOT_APPLIED', applied_at = now(), error = left($2, 500)
			WHERE id = $1 AND state = 'APPROVED'`, id, err.Error()); cerr != nil {
			return false, fmt.Errorf("apply schedule request %d: %w (and closing it: %v)", id, err, cerr)
		}
		return true, fmt.Errorf("apply schedule request %d: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE schedule_requests SET state = $2, applied_at = now(), withdrawn = $3, error = nullif($4, '') WHERE id = $1`,
		id, state, withdrawn, why); err != nil {
		return false, fmt.Errorf("close schedule request %d: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit schedule request %d: %w", id, err)
	}
	return true, nil
}

// ActiveZones are the zones of the active schedules, each once.
func ActiveZones(ctx context.Context, db pgdb.DB) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT DISTINCT time_zone FROM schedules WHERE state = 'ACTIVE'`)
	if err != nil {
		return nil, fmt.Errorf("active zones: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("active zones: %w", err)
	}
	return out, nil
}

// AheadWithOtherRules is up to limit occurrences made ahead (due after
// now) of the active schedules in zones[i] whose recorded zone rules are
// not rules[i], whose payments are still PENDING, never claimed and not
// moved by an operator (run_at still their due time), with their
// schedules: what a change of zone rules may have moved. One statement
// for every zone.
func AheadWithOtherRules(ctx context.Context, db pgdb.DB, zones, rules []string, now time.Time, limit int) ([]Schedule, []Occurrence, error) {
	rows, err := db.Query(ctx, `
SELECT o.schedule_id, o.occurrence, o.idx, o.payment_id, o.due_time, coalesce(o.rules, '')
FROM unnest($1::text[], $2::text[]) AS z(zone, rules)
JOIN schedules s ON s.time_zone = z.zone AND s.state = 'ACTIVE'
JOIN schedule_occurrences o ON o.schedule_id = s.id AND o.due_time > $3 AND o.rules IS DISTINCT FROM z.rules
JOIN payments p ON p.id = o.payment_id AND p.due_time = o.due_time
WHERE p.status = 'PENDING' AND NOT p.probe_first AND p.run_at = p.due_time
ORDER BY o.schedule_id, o.occurrence
LIMIT $4`, zones, rules, now, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("occurrences ahead: %w", err)
	}
	var occs []Occurrence
	for rows.Next() {
		var o Occurrence
		if err := rows.Scan(&o.Schedule, &o.Key, &o.Index, &o.Payment, &o.DueAt, &o.Rules); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("occurrences ahead: %w", err)
		}
		o.DueAt = o.DueAt.UTC()
		occs = append(occs, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("occurrences ahead: %w", err)
	}
	if len(occs) == 0 {
		return nil, nil, nil
	}
	rows, err = db.Query(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE id IN (
		SELECT DISTINCT schedule_id FROM unnest($1::uuid[]) AS u(schedule_id))`, scheduleIDs(occs))
	if err != nil {
		return nil, nil, fmt.Errorf("schedules of occurrences ahead: %w", err)
	}
	scheds, err := collectSchedules(rows)
	if err != nil {
		return nil, nil, err
	}
	return scheds, occs, nil
}

// StampRules records that occurrences (schedule and key) still fall due
// when they were made for under the zone rules each carries.
func StampRules(ctx context.Context, db pgdb.DB, os []Occurrence) error {
	if len(os) == 0 {
		return nil
	}
	keys, rules := make([]string, len(os)), make([]string, len(os))
	for i, o := range os {
		keys[i], rules[i] = o.Key, o.Rules
	}
	_, err := db.Exec(ctx, `UPDATE schedule_occurrences o SET rules = i.rules
		FROM unnest($1::uuid[], $2::text[], $3::text[]) AS i(schedule_id, occurrence, rules)
		WHERE o.schedule_id = i.schedule_id AND o.occurrence = i.occurrence`, scheduleIDs(os), keys, rules)
	if err != nil {
		return fmt.Errorf("stamp zone rules: %w", err)
	}
	return nil
}

func scheduleIDs(os []Occurrence) []uuid.UUID {
	out := make([]uuid.UUID, len(os))
	for i, o := range os {
		out[i] = o.Schedule
	}
	return out
}

// withdrawKeysSQL withdraws the named occurrences (schedule, key and the
// payment read for it) as a pause withdraws them, and returns the keys it
// released.
//
// Why it is safe: as withdrawSQL, each payment is cancelled from PENDING
// only and not probe_first, so one a sweeper claimed (or that may have
// charged) is left to run at the time it was made for, and only while its
// run time is still its due time (one an operator rescheduled since it was
// read is left alone too), and only the keys
// of the payments cancelled here are released, in the same statement.
const withdrawKeysSQL = `
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::uuid[]) AS t(schedule_id, occurrence, payment_id)
), made AS (
    SELECT o.schedule_id, o.occurrence, o.payment_id, o.due_time
    FROM schedule_occurrences o JOIN input i USING (schedule_id, occurrence, payment_id)
), cancelled AS (
    UPDATE payments p SET status = 'CANCELLED', updated_at = now()
    FROM made m
    WHERE p.id = m.payment_id AND p.due_time = m.due_time AND p.status = 'PENDING' AND NOT p.probe_first
      AND p.run_at = p.due_time
    RETURNING m.schedule_id, m.occurrence
)
DELETE FROM schedule_occurrences o USING cancelled c
WHERE o.schedule_id = c.schedule_id AND o.occurrence = c.occurrence
RETURNING o.schedule_id, o.occurrence`

// RemakeOccurrences re-makes occurrences whose charge time moved (a
// tzdata change): each one's payment (o.Payment, as read) is withdrawn
// (cancelled, its key released) and a new one made for the same key at
// moved[i]'s due time and rules, in one transaction. The schedules are
// locked first and only active ones' occurrences are re-made, so a pause,
// a cancel or an update of the payer waits for it, or it for them, and
// either way no payment stands on a schedule that was stopped. One whose
// payment a sweeper claimed meanwhile is left alone, and not re-made. It
// returns how many it re-made.
func RemakeOccurrences(ctx context.Context, db pgdb.DB, read, moved []Occurrence) (int, error) {
	if len(read) == 0 {
		return 0, nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit it does nothing
	rows, err := tx.Query(ctx, `SELECT id FROM schedules WHERE id = ANY ($1) AND state = 'ACTIVE' ORDER BY id FOR UPDATE`, scheduleIDs(read))
	if err != nil {
		return 0, fmt.Errorf("lock schedules: %w", err)
	}
	active, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, fmt.Errorf("lock schedules: %w", err)
	}
	var keep []int
	for i, o := range read {
		if slices.Contains(active, o.Schedule) {
			keep = append(keep, i)
		}
	}
	keys, payments, scheds := make([]string, len(keep)), make([]uuid.UUID, len(keep)), make([]uuid.UUID, len(keep))
	for j, i := range keep {
		keys[j], payments[j], scheds[j] = read[i].Key, read[i].Payment, read[i].Schedule
	}
	rows, err = tx.Query(ctx, withdrawKeysSQL, scheds, keys, payments)
	if err != nil {
		return 0, fmt.Errorf("withdraw moved occurrences: %w", err)
	}
	type key struct {
		s uuid.UUID
		k string
	}
	released := map[key]bool{}
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.s, &k.k); err != nil {
			rows.Close()
			return 0, fmt.Errorf("withdraw moved occurrences: %w", err)
		}
		released[k] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("withdraw moved occurrences: %w", err)
	}
	var again []Occurrence
	for _, o := range moved {
		if released[key{o.Schedule, o.Key}] {
			again = append(again, o)
		}
	}
	n, err := MakeOccurrences(ctx, tx, again)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
}
