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
	"github.com/paysched/paysched/pkg/store/scheduledb"
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

// fromRow is the Schedule r reads (its last occurrence and idempotency
// key empty for none).
func fromRow(r scheduledb.Schedule) (*Schedule, error) {
	s := Schedule{ID: r.ID, Tenant: r.Tenant, Payer: r.Payer, Payee: r.Payee, Amount: r.AmountMinor, Currency: r.Currency,
		Description: r.Description, Rule: r.Rrule, Start: r.StartLocal, Zone: r.TimeZone, MonthEnd: r.MonthEnd,
		BusinessDays: r.BusinessDays, Calendar: r.Calendar, CatchUp: r.CatchUp, CatchUpBound: int(r.CatchUpBound),
		State: ScheduleState(r.State), ResumeAt: r.ResumeAt, LastIndex: int(r.LastIndex), NextAt: r.NextAt,
		RequestHash: r.RequestHash, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
	if r.Seq != nil { // an identity: never NULL, though sqlc cannot tell
		s.Seq = *r.Seq
	}
	if r.LastOccurrence != nil {
		s.LastOccurrence = *r.LastOccurrence
	}
	if r.IdempotencyKey != nil {
		s.IdempotencyKey = *r.IdempotencyKey
	}
	if len(r.Metadata) > 0 {
		if err := json.Unmarshal(r.Metadata, &s.Metadata); err != nil {
			return nil, fmt.Errorf("decode metadata of schedule %s: %w", s.ID, err)
		}
	}
	return &s, nil
}

// scheduleOf is the Schedule of a statement's row, or the statement's
// error.
func scheduleOf(r scheduledb.Schedule, err error) (*Schedule, error) {
	if err != nil {
		return nil, err
	}
	return fromRow(r)
}

// schedulesOf are the Schedules of a statement's rows (nil for none), or
// the statement's error.
func schedulesOf(rows []scheduledb.Schedule, err error) ([]Schedule, error) {
	if err != nil {
		return nil, err
	}
	var out []Schedule
	for _, r := range rows {
		s, err := fromRow(r)
		if err != nil {
			return nil, err
		}
		out = append(out, *s)
	}
	return out, nil
}

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
	q := scheduledb.New(db)
	got, err := scheduleOf(q.CreateSchedule(ctx, scheduledb.CreateScheduleParams{ID: s.ID, Tenant: s.Tenant, Payer: s.Payer,
		Payee: s.Payee, AmountMinor: s.Amount, Currency: s.Currency, Description: s.Description, Metadata: meta,
		Rrule: s.Rule, StartLocal: s.Start, TimeZone: s.Zone, MonthEnd: s.MonthEnd, BusinessDays: s.BusinessDays,
		Calendar: s.Calendar, CatchUp: s.CatchUp, CatchUpBound: int32(s.CatchUpBound), NextAt: s.NextAt,
		IdempotencyKey: s.IdempotencyKey, RequestHash: s.RequestHash, LastOccurrence: s.LastOccurrence,
		LastIndex: int32(s.LastIndex)}))
	if err == nil {
		return got, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("create schedule: %w", err)
	}
	got, err = scheduleOf(q.ScheduleByKey(ctx, scheduledb.ScheduleByKeyParams{Payer: s.Payer, IdempotencyKey: s.IdempotencyKey}))
	if err != nil {
		return nil, false, fmt.Errorf("read schedule by key: %w", err)
	}
	if !bytes.Equal(got.RequestHash, s.RequestHash) {
		return nil, false, ErrScheduleKeyReused
	}
	return got, true, nil
}

// GetSchedule reads payer's schedule (any payer's when payer is empty), or
// ErrNotFound.
func GetSchedule(ctx context.Context, db pgdb.DB, payer string, id uuid.UUID) (*Schedule, error) {
	s, err := scheduleOf(scheduledb.New(db).GetSchedule(ctx, scheduledb.GetScheduleParams{ID: id, Payer: payer}))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get schedule: %w", err)
	}
	return s, nil
}

// ListSchedules is a page of payer's schedules, newest first, before seq
// before (0: from the newest).
func ListSchedules(ctx context.Context, db pgdb.DB, payer string, before int64, limit int) ([]Schedule, error) {
	out, err := schedulesOf(scheduledb.New(db).ListSchedules(ctx, scheduledb.ListSchedulesParams{Payer: payer,
		Before: before, MaxRows: int64(limit)}))
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out, nil
}

// PauseSchedule pauses payer's active schedule until resumeAt (nil: until
// resumed), withdrawing the occurrences made ahead (due after now); CancelSchedule ends an
// active or paused one for good, withdrawing them too. Each returns the
// schedule and how many occurrences it withdrew; ErrNotFound when there
// is no such schedule, ErrScheduleState (with the schedule as it stands)
// when it is in no state the change may leave.
func PauseSchedule(ctx context.Context, db pgdb.DB, now time.Time, payer string, id uuid.UUID, resumeAt *time.Time) (*Schedule, int, error) {
	return withdraw(ctx, db, now, payer, id, true, func(q *scheduledb.Queries) (scheduledb.Schedule, error) {
		return q.PauseSchedule(ctx, scheduledb.PauseScheduleParams{ID: id, Payer: payer, ResumeAt: resumeAt})
	})
}

// CancelSchedule ends payer's active or paused schedule for good; see
// PauseSchedule.
func CancelSchedule(ctx context.Context, db pgdb.DB, now time.Time, payer string, id uuid.UUID) (*Schedule, int, error) {
	return withdraw(ctx, db, now, payer, id, true, func(q *scheduledb.Queries) (scheduledb.Schedule, error) {
		return q.CancelSchedule(ctx, scheduledb.CancelScheduleParams{ID: id, Payer: payer})
	})
}

// withdraw changes payer's schedule id with change (a statement of
// scheduledb that returns the schedule it changed and locks its row, and
// no row when the schedule is in no state the change may leave) and
// withdraws what was made ahead of now, in one transaction; placeBack
// moves its place back to its latest occurrence still made (an update
// sets a place of its own). Why the withdrawal is safe:
// scheduledb/schedules.sql, Withdraw.
func withdraw(ctx context.Context, db pgdb.DB, now time.Time, payer string, id uuid.UUID, placeBack bool,
	change func(*scheduledb.Queries) (scheduledb.Schedule, error)) (*Schedule, int, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx)
	q := scheduledb.New(tx)
	s, err := scheduleOf(change(q))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, err := notInState(ctx, db, payer, id)
		return cur, 0, err
	}
	if err != nil {
		return nil, 0, fmt.Errorf("change schedule state: %w", err)
	}
	n, err := q.Withdraw(ctx, scheduledb.WithdrawParams{ScheduleID: id, Cutoff: now})
	if err != nil {
		return nil, 0, fmt.Errorf("withdraw occurrences: %w", err)
	}
	if placeBack {
		if err := q.PlaceBack(ctx, id); err != nil {
			return nil, 0, fmt.Errorf("move place back: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, 0, fmt.Errorf("commit: %w", err)
	}
	return s, int(n), nil
}

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
	return withdraw(ctx, db, now, payer, s.ID, false, func(q *scheduledb.Queries) (scheduledb.Schedule, error) {
		return q.UpdateSchedule(ctx, scheduledb.UpdateScheduleParams{ID: s.ID, Payer: payer, Payee: s.Payee,
			AmountMinor: s.Amount, Currency: s.Currency, Description: s.Description, Metadata: meta, Rrule: s.Rule,
			StartLocal: s.Start, TimeZone: s.Zone, MonthEnd: s.MonthEnd, BusinessDays: s.BusinessDays,
			Calendar: s.Calendar, CatchUp: s.CatchUp, CatchUpBound: int32(s.CatchUpBound),
			LastOccurrence: s.LastOccurrence, LastIndex: int32(s.LastIndex), NextAt: s.NextAt})
	})
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
	s, err := scheduleOf(scheduledb.New(db).ResumeSchedule(ctx, scheduledb.ResumeScheduleParams{ID: id, Payer: payer,
		NextAt: now}))
	if errors.Is(err, pgx.ErrNoRows) {
		return notInState(ctx, db, payer, id)
	}
	if err != nil {
		return nil, fmt.Errorf("resume schedule: %w", err)
	}
	return s, nil
}

// DueSchedules locks and returns up to limit schedules with occurrences
// to make before horizon, or resuming by now. db must be a transaction.
func DueSchedules(ctx context.Context, tx pgx.Tx, now, horizon time.Time, limit int) ([]Schedule, error) {
	out, err := schedulesOf(scheduledb.New(tx).DueSchedules(ctx, scheduledb.DueSchedulesParams{Horizon: horizon,
		ResumeBy: now, MaxRows: int64(limit)}))
	if err != nil {
		return nil, fmt.Errorf("due schedules: %w", err)
	}
	return out, nil
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

// MakeOccurrences writes the occurrences not made already, and returns
// how many it made. Why it is safe: scheduledb/schedules.sql,
// MakeOccurrences.
func MakeOccurrences(ctx context.Context, db pgdb.DB, os []Occurrence) (int, error) {
	if len(os) == 0 {
		return 0, nil
	}
	// The ids as [16]byte, whose arrays pgx encodes without reflection.
	scheds, keys, ids, dues, idxs, rules := make([][16]byte, len(os)), make([]string, len(os)), make([][16]byte, len(os)),
		make([]time.Time, len(os)), make([]int32, len(os)), make([]string, len(os))
	for i, o := range os {
		scheds[i], keys[i], ids[i], dues[i], idxs[i], rules[i] = o.Schedule, o.Key, o.Payment, o.DueAt, int32(o.Index), o.Rules
	}
	n, err := scheduledb.New(db).MakeOccurrences(ctx, scheduledb.MakeOccurrencesParams{ScheduleIds: scheds,
		Occurrences: keys, PaymentIds: ids, DueTimes: dues, Idxs: idxs, ZoneRules: rules})
	if err != nil {
		return 0, fmt.Errorf("make occurrences: %w", err)
	}
	return int(n), nil
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

// SetPlanned records where each schedule's planning stands, naming the
// planner as the actor of the events it causes. The planner holds each
// row's lock (DueSchedules): scheduledb/schedules.sql, SetPlanned.
func SetPlanned(ctx context.Context, db pgdb.DB, ps []Planned) error {
	if len(ps) == 0 {
		return nil
	}
	// Arrays pgx encodes without reflection: the ids as [16]byte, and
	// each next instant as a time and whether there is one.
	ids, lasts, idxs, states := make([][16]byte, len(ps)), make([]string, len(ps)), make([]int32, len(ps)), make([]string, len(ps))
	nexts, hasNext := make([]time.Time, len(ps)), make([]bool, len(ps))
	for i, p := range ps {
		ids[i], lasts[i], idxs[i], states[i] = p.Schedule, p.LastOccurrence, int32(p.LastIndex), string(p.State)
		if p.NextAt != nil {
			nexts[i], hasNext[i] = *p.NextAt, true
		}
	}
	if err := scheduledb.New(db).SetPlanned(ctx, scheduledb.SetPlannedParams{Ids: ids, LastOccurrences: lasts,
		LastIndexes: idxs, NextAts: nexts, HasNext: hasNext, States: states}); err != nil {
		return fmt.Errorf("set planned: %w", err)
	}
	return nil
}

// ScheduleOccurrences are up to limit of a schedule's occurrences made,
// newest first.
func ScheduleOccurrences(ctx context.Context, db pgdb.DB, id uuid.UUID, limit int) ([]Occurrence, error) {
	rows, err := scheduledb.New(db).ScheduleOccurrences(ctx, scheduledb.ScheduleOccurrencesParams{ScheduleID: id,
		MaxRows: int64(limit)})
	if err != nil {
		return nil, fmt.Errorf("schedule occurrences: %w", err)
	}
	var out []Occurrence
	for _, r := range rows {
		out = append(out, Occurrence{Schedule: id, Key: r.Occurrence, Index: int(r.Idx), Payment: r.PaymentID,
			DueAt: r.DueTime.UTC()})
	}
	return out, nil
}

// AllSchedules is a page of every payer's schedules (the operators'
// view), newest first, before seq before (0: from the newest), in state
// and tenant when given.
func AllSchedules(ctx context.Context, db pgdb.DB, before int64, state ScheduleState, tenant string, limit int) ([]Schedule, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	// Every tenant's down schedules_seq_idx, one tenant's down its range
	// of schedules_tenant_seq_idx.
	q := scheduledb.New(db)
	var out []Schedule
	var err error
	if tenant == "" {
		out, err = schedulesOf(q.AllSchedules(ctx, scheduledb.AllSchedulesParams{Before: before, InState: string(state),
			MaxRows: int64(limit)}))
	} else {
		out, err = schedulesOf(q.TenantSchedules(ctx, scheduledb.TenantSchedulesParams{Tenant: tenant, Before: before,
			InState: string(state), MaxRows: int64(limit)}))
	}
	if err != nil {
		return nil, fmt.Errorf("list all schedules: %w", err)
	}
	return out, nil
}

// ActiveSchedules is a page of the active schedules after id after (the
// nil uuid: from the first), in id order.
func ActiveSchedules(ctx context.Context, db pgdb.DB, after uuid.UUID, limit int) ([]Schedule, error) {
	out, err := schedulesOf(scheduledb.New(db).ActiveSchedules(ctx, scheduledb.ActiveSchedulesParams{AfterID: after,
		MaxRows: int64(limit)}))
	if err != nil {
		return nil, fmt.Errorf("active schedules: %w", err)
	}
	return out, nil
}

// MadeOccurrence is an occurrence made, with its payment as it stands.
type MadeOccurrence struct {
	Occurrence
	// Status is its payment's status ('' when the payment is gone to
	// retention).
	Status string
}

// ScheduleHistory is up to limit of a schedule's occurrences made, newest
// first, with their payments' status.
func ScheduleHistory(ctx context.Context, db pgdb.DB, id uuid.UUID, limit int) ([]MadeOccurrence, error) {
	rows, err := scheduledb.New(db).ScheduleHistory(ctx, scheduledb.ScheduleHistoryParams{ScheduleID: id,
		MaxRows: int64(limit)})
	if err != nil {
		return nil, fmt.Errorf("schedule history: %w", err)
	}
	var out []MadeOccurrence
	for _, r := range rows {
		out = append(out, MadeOccurrence{Occurrence: Occurrence{Schedule: id, Key: r.Occurrence, Index: int(r.Idx),
			Payment: r.PaymentID, DueAt: r.DueTime.UTC()}, Status: r.Status})
	}
	return out, nil
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
	rows, err := scheduledb.New(db).ScheduleEvents(ctx, scheduledb.ScheduleEventsParams{ScheduleID: id,
		MaxRows: int64(limit)})
	if err != nil {
		return nil, fmt.Errorf("schedule events: %w", err)
	}
	out := make([]ScheduleEvent, 0, len(rows))
	for _, r := range rows {
		out = append(out, ScheduleEvent(r))
	}
	return out, nil
}

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
	rows, err := scheduledb.New(db).PendingByWeek(ctx, scheduledb.PendingByWeekParams{FromAt: from, Weeks: int32(weeks),
		DueBound: DueBound(from.Add(time.Duration(weeks) * 7 * 24 * time.Hour))})
	if err != nil {
		return nil, fmt.Errorf("pending by week: %w", err)
	}
	out := make([]PendingWeek, 0, len(rows))
	for _, r := range rows {
		out = append(out, PendingWeek{Week: int(r.Week), Currency: r.Currency, Count: r.N, Amount: r.Amount})
	}
	return out, nil
}

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
	q := scheduledb.New(tx)
	req, err := q.NextApprovedRequest(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("next approved schedule request: %w", err)
	}
	if req.DecidedName == nil {
		// The database records an approval with its approver's name.
		return false, fmt.Errorf("next approved schedule request: request %d names no approver", req.ID)
	}
	id, sched := req.ID, req.ScheduleID
	actor := "admin:" + req.RequestedName + ", approved by " + *req.DecidedName
	if err := q.NameActor(ctx, actor); err != nil {
		return false, fmt.Errorf("name the actor: %w", err)
	}
	withdrawn := 0
	switch req.Action {
	case "PAUSE":
		_, withdrawn, err = PauseSchedule(ctx, tx, now, "", sched, req.ResumeAt)
	case "CANCEL":
		_, withdrawn, err = CancelSchedule(ctx, tx, now, "", sched)
	case "RESUME":
		_, err = ResumeSchedule(ctx, tx, now, "", sched)
	default:
		err = fmt.Errorf("unknown action %q", req.Action)
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
		if cerr := scheduledb.New(db).FailRequest(ctx, scheduledb.FailRequestParams{ID: id, Why: err.Error()}); cerr != nil {
			return false, fmt.Errorf("apply schedule request %d: %w (and closing it: %v)", id, err, cerr)
		}
		return true, fmt.Errorf("apply schedule request %d: %w", id, err)
	}
	if err := q.CloseRequest(ctx, scheduledb.CloseRequestParams{ID: id, NewState: state, Withdrawn: int32(withdrawn),
		Why: why}); err != nil {
		return false, fmt.Errorf("close schedule request %d: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit schedule request %d: %w", id, err)
	}
	return true, nil
}

// ActiveZones are the zones of the active schedules, each once.
func ActiveZones(ctx context.Context, db pgdb.DB) ([]string, error) {
	zones, err := scheduledb.New(db).ActiveZones(ctx)
	if err != nil {
		return nil, fmt.Errorf("active zones: %w", err)
	}
	if zones == nil {
		zones = []string{}
	}
	return zones, nil
}

// AheadWithOtherRules is up to limit occurrences made ahead (due after
// now) of the active schedules in zones[i] whose recorded zone rules are
// not rules[i], whose payments are still PENDING, never claimed and not
// moved by an operator (run_at still their due time), with their
// schedules: what a change of zone rules may have moved. One statement
// for every zone.
func AheadWithOtherRules(ctx context.Context, db pgdb.DB, zones, rules []string, now time.Time, limit int) ([]Schedule, []Occurrence, error) {
	q := scheduledb.New(db)
	rows, err := q.AheadWithOtherRules(ctx, scheduledb.AheadWithOtherRulesParams{Zones: zones, ZoneRules: rules,
		Cutoff: now, MaxRows: int64(limit)})
	if err != nil {
		return nil, nil, fmt.Errorf("occurrences ahead: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil, nil
	}
	occs := make([]Occurrence, len(rows))
	for i, r := range rows {
		occs[i] = Occurrence{Schedule: r.ScheduleID, Key: r.Occurrence, Index: int(r.Idx), Payment: r.PaymentID,
			DueAt: r.DueTime.UTC(), Rules: r.Rules}
	}
	scheds, err := schedulesOf(q.SchedulesByID(ctx, scheduleIDs(occs)))
	if err != nil {
		return nil, nil, fmt.Errorf("schedules of occurrences ahead: %w", err)
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
	if err := scheduledb.New(db).StampRules(ctx, scheduledb.StampRulesParams{ScheduleIds: scheduleIDs(os), Occurrences: keys,
		ZoneRules: rules}); err != nil {
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

// RemakeOccurrences re-makes occurrences whose charge time moved (a
// tzdata change): each one's payment (o.Payment, as read) is withdrawn
// (cancelled, its key released) and a new one made for the same key at
// moved[i]'s due time and rules, in one transaction. The schedules are
// locked first and only active ones' occurrences are re-made, so a pause,
// a cancel or an update of the payer waits for it, or it for them, and
// either way no payment stands on a schedule that was stopped. One whose
// payment a sweeper claimed meanwhile is left alone, and not re-made. It
// returns how many it re-made. Why the withdrawal is safe:
// scheduledb/schedules.sql, WithdrawKeys.
func RemakeOccurrences(ctx context.Context, db pgdb.DB, read, moved []Occurrence) (int, error) {
	if len(read) == 0 {
		return 0, nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit it does nothing
	q := scheduledb.New(tx)
	active, err := q.LockActive(ctx, scheduleIDs(read))
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
	rows, err := q.WithdrawKeys(ctx, scheduledb.WithdrawKeysParams{ScheduleIds: scheds, Occurrences: keys,
		PaymentIds: payments})
	if err != nil {
		return 0, fmt.Errorf("withdraw moved occurrences: %w", err)
	}
	type key struct {
		s uuid.UUID
		k string
	}
	released := make(map[key]bool, len(rows))
	for _, r := range rows {
		released[key{r.ScheduleID, r.Occurrence}] = true
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
