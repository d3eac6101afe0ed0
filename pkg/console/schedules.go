package console

// Schedules: the list of every payer's recurring schedules (by state and
// tenant), one schedule's page (its plan, its next occurrences and why
// each moved, the occurrences made with their payments, and its life as
// schedule_events recorded it), and the forecast of what falls due over
// the coming weeks, occurrences not yet made included.

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/recurrence"
	"github.com/paysched/paysched/pkg/store"
)

// scheduleStates are the states the list filters by.
var scheduleStates = []store.ScheduleState{store.ScheduleActive, store.SchedulePaused, store.ScheduleEnded, store.ScheduleCancelled}

func (c *Console) schedulesPage(w http.ResponseWriter, r *http.Request, v *view) {
	q := r.URL.Query()
	state, tenant := store.ScheduleState(q.Get("state")), q.Get("tenant")
	if state != "" && !slices.Contains(scheduleStates, state) {
		c.fail(w, r, v, http.StatusBadRequest, "There is no schedule state "+strconv.Quote(string(state))+": choose one from the list.")
		return
	}
	if tenant != "" {
		if err := auth.CheckTenant(tenant); err != nil {
			c.fail(w, r, v, http.StatusBadRequest, "That is not a tenant name: "+err.Error()+".")
			return
		}
	}
	before, ok := c.beforeParam(w, r, v, 0)
	if !ok {
		return
	}
	ctx := r.Context()
	list, err := store.AllSchedules(ctx, c.db, before, state, tenant, pageSize+1)
	if err != nil {
		c.dbFail(w, r, v, "list schedules", err)
		return
	}
	data := map[string]any{"States": scheduleStates, "State": string(state), "Tenant": tenant}
	if len(list) > pageSize {
		list = list[:pageSize]
		next := url.Values{"before": {strconv.FormatInt(list[len(list)-1].Seq, 10)}}
		if state != "" {
			next.Set("state", string(state))
		}
		if tenant != "" {
			next.Set("tenant", tenant)
		}
		data["NextURL"] = Prefix + "/schedules?" + next.Encode()
	}
	data["Schedules"] = list
	v.Title, v.Data = "Schedules", data
	c.render(w, http.StatusOK, "schedules.html", v)
}

// previewShown is how many next occurrences a schedule's page shows.
const previewShown = 12

// upcoming is one next occurrence on a schedule's page.
type upcoming struct {
	Index   int
	Nominal string
	At      time.Time
	Local   string
	Moved   []recurrence.Reason
	Made    bool
}

func (c *Console) schedulePage(w http.ResponseWriter, r *http.Request, v *view) {
	id, ok := c.pathUUID(w, r, v, "That is not a schedule id (a UUID).")
	if !ok {
		return
	}
	ctx := r.Context()
	s, err := store.GetSchedule(ctx, c.db, "", id)
	if err == store.ErrNotFound {
		c.fail(w, r, v, http.StatusNotFound, "There is no schedule "+id.String()+".")
		return
	}
	if err != nil {
		c.dbFail(w, r, v, "read schedule", err)
		return
	}
	made, err := store.ScheduleHistory(ctx, c.db, id, pageSize)
	if err != nil {
		c.dbFail(w, r, v, "schedule history", err)
		return
	}
	life, err := store.ScheduleEvents(ctx, c.db, id, pageSize)
	if err != nil {
		c.dbFail(w, r, v, "schedule events", err)
		return
	}
	reqs, err := c.requests.ListScheduleRequests(ctx, id)
	if err != nil {
		c.dbFail(w, r, v, "schedule requests", err)
		return
	}
	data := map[string]any{"S": s, "Made": made, "Life": life, "Requests": reqs, "CanAsk": v.Session.Role >= login.Operator,
		"CanDecide": v.Session.Role >= login.Admin, "Me": v.Session.Operator}
	if s.State == store.ScheduleActive || s.State == store.SchedulePaused {
		// What the plan makes next from now, made already or not: the
		// payer's preview, with the occurrences the planner has made marked.
		plan, err := planner.Plan(s)
		if err != nil {
			data["PlanError"] = err.Error()
		} else {
			madeKeys := map[string]bool{}
			for _, m := range made {
				madeKeys[m.Key] = true
			}
			var next []upcoming
			for _, o := range plan.Next(time.Now(), previewShown) {
				next = append(next, upcoming{Index: o.Index, Nominal: o.Nominal.String(), At: o.At, Local: o.At.In(plan.Zone).Format("2006-01-02 15:04 MST"),
					Moved: o.Moved, Made: madeKeys[o.Nominal.String()]})
			}
			data["Next"] = next
		}
	}
	v.Title, v.Data = "Schedule "+id.String(), data
	c.render(w, http.StatusOK, "schedule.html", v)
}

// Forecast of the coming weeks.
const (
	// weeksAhead is how far the overview's weekly forecast looks.
	weeksAhead = 8
	// forecastSchedules bounds the schedules one refresh expands (the
	// forecast then says "at least").
	forecastSchedules = 2_000_000
	// forecastPerSchedule bounds one schedule's occurrences in the window
	// (a DAILY rule makes 56).
	forecastPerSchedule = 500
)

// WeekLoad is what falls due in one week in one currency: the payments
// made (PENDING) and the occurrences of active schedules not made yet.
type WeekLoad struct {
	Week                   time.Time
	Currency               string
	Made, MadeAmount       int64
	Planned, PlannedAmount int64
}

// WeekForecast is the overview's forecast of the coming weeks.
type WeekForecast struct {
	Weeks []WeekLoad
	// Capped: more schedules than one refresh expands; Planned is at least.
	Capped bool
	At     time.Time
}

// loadWeekForecast reads what falls due from now over weeksAhead weeks,
// per week (from now, 7 days each) and currency: the payments made, from
// the sweep index, and every active schedule's occurrences after its
// place, expanded as the planner will (its place is the last one made).
func loadWeekForecast(ctx context.Context, db pgdb.DB, now time.Time) (WeekForecast, error) {
	until := now.Add(weeksAhead * 7 * 24 * time.Hour)
	week := func(t time.Time) time.Time {
		return now.Add(time.Duration(int64(t.Sub(now)/(7*24*time.Hour))) * 7 * 24 * time.Hour)
	}
	type key struct {
		week     time.Time
		currency string
	}
	loads := map[key]*WeekLoad{}
	at := func(t time.Time, cur string) *WeekLoad {
		k := key{week(t), cur}
		if loads[k] == nil {
			loads[k] = &WeekLoad{Week: k.week, Currency: cur}
		}
		return loads[k]
	}
	weeks, err := store.PendingByWeek(ctx, db, now, weeksAhead)
	if err != nil {
		return WeekForecast{}, err
	}
	for _, w := range weeks {
		l := at(now.Add(time.Duration(w.Week)*7*24*time.Hour), w.Currency)
		l.Made += w.Count
		l.MadeAmount += w.Amount
	}
	out := WeekForecast{At: now}
	var after uuid.UUID
	for seen := 0; ; {
		page, err := store.ActiveSchedules(ctx, db, after, 2000)
		if err != nil {
			return WeekForecast{}, err
		}
		for i := range page {
			s := &page[i]
			planner.Ahead(s, now, until, forecastPerSchedule, func(o recurrence.Occurrence) {
				t := o.At
				if t.Before(now) {
					t = now // the planner is behind: due at once
				}
				l := at(t, s.Currency)
				l.Planned++
				l.PlannedAmount += s.Amount
			})
		}
		seen += len(page)
		if len(page) < 2000 {
			break
		}
		if seen >= forecastSchedules {
			out.Capped = true
			break
		}
		after = page[len(page)-1].ID
	}
	for _, l := range loads {
		out.Weeks = append(out.Weeks, *l)
	}
	slices.SortFunc(out.Weeks, func(a, b WeekLoad) int {
		if c := a.Week.Compare(b.Week); c != 0 {
			return c
		}
		if a.Currency < b.Currency {
			return -1
		}
		if a.Currency > b.Currency {
			return 1
		}
		return 0
	})
	return out, nil
}

// requestSchedule records an operator's pause, resume or cancel of a
// schedule: it applies once a second admin approves it (payments-api's
// planner applies it at its next pass).
func (c *Console) requestSchedule(w http.ResponseWriter, r *http.Request, v *view) {
	id, ok := c.pathUUID(w, r, v, "That is not a schedule id (a UUID).")
	if !ok {
		return
	}
	action := r.PostForm.Get("action")
	if action != approval.SchedulePause && action != approval.ScheduleResume && action != approval.ScheduleCancel {
		c.fail(w, r, v, http.StatusBadRequest, "Choose pause, resume or cancel.")
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" || !utf8.ValidString(reason) || utf8.RuneCountInString(reason) > 300 ||
		strings.ContainsFunc(reason, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		c.fail(w, r, v, http.StatusBadRequest, "A reason is required: one line of at most 300 characters.")
		return
	}
	ctx := r.Context()
	who := v.Session.Who()
	_, err := c.requests.RequestSchedule(ctx, action, id, nil, reason, approval.Identity(who))
	var stateErr *approval.ScheduleStateError
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, v, http.StatusNotFound, "There is no schedule "+id.String()+".")
		return
	case errors.As(err, &stateErr):
		c.fail(w, r, v, http.StatusConflict, "Not asked: "+stateErr.Error()+".")
		return
	case err != nil:
		c.dbFail(w, r, v, "request schedule change", err)
		return
	}
	c.log.Info("console: schedule change requested", "schedule", id, "action", action, "operator", who.Name, "identity", who.Operator)
	http.Redirect(w, r, Prefix+"/schedules/"+id.String(), http.StatusSeeOther)
}

// decideSchedule approves or rejects a schedule request, as a second admin.
func (c *Console) decideSchedule(w http.ResponseWriter, r *http.Request, v *view) {
	id, rid, approve, ok := c.resourceDecision(w, r, v, "That is not a request of a schedule.")
	if !ok {
		return
	}
	ctx := r.Context()
	if q, err := c.requests.GetScheduleRequest(ctx, rid); errors.Is(err, approval.ErrNotFound) || (err == nil && q.Schedule != id) {
		c.fail(w, r, v, http.StatusNotFound, "There is no such request on this schedule.")
		return
	} else if err != nil {
		c.dbFail(w, r, v, "read schedule request", err)
		return
	}
	by := v.Session.Who()
	if !c.decided(w, r, v, c.requests.DecideSchedule(ctx, rid, approve, approval.Identity(by)), "decide schedule request") {
		return
	}
	c.log.Info("console: schedule change decided", "schedule", id, "request", rid, "approved", approve, "operator", by.Name, "identity", by.Operator)
	http.Redirect(w, r, Prefix+"/schedules/"+id.String(), http.StatusSeeOther)
}
