package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/engine/planner"
	"github.com/paysched/paysched/pkg/store"
)

// TestSchedulesPagesAndForecast: the list and a schedule's page show a
// schedule, its next occurrences, what was made and its life; bad input
// is a client error; and the weekly forecast counts the occurrences the
// planner has not made yet beside the payments it made, and none of a
// paused schedule's.
func TestSchedulesPagesAndForecast(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := store.EnsurePartitions(ctx, h.db, now.AddDate(0, 0, -1), now.AddDate(0, 0, 12)); err != nil {
		t.Fatal(err)
	}
	tomorrow := now.AddDate(0, 0, 1).Format("2006-01-02") + "T09:00:00"
	mk := func(payer, currency string) *store.Schedule {
		s := store.Schedule{ID: uuid.New(), Tenant: "acme", Payer: payer, Payee: "landlord", Amount: 5000, Currency: currency,
			Rule: "FREQ=WEEKLY", Start: tomorrow, Zone: "UTC", MonthEnd: "CLAMP", BusinessDays: "NONE", CatchUp: "SKIP_MISSED", CatchUpBound: 12}
		plan, err := planner.Plan(&s)
		if err != nil {
			t.Fatal(err)
		}
		place, _, err := planner.Place(plan, now)
		if err != nil {
			t.Fatal(err)
		}
		s.NextAt = place.NextAt
		got, _, err := store.CreateSchedule(ctx, h.db, s)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	weekly, paused := mk("rita", "EUR"), mk("sam", "GBP")
	if _, _, err := store.PauseSchedule(ctx, h.db, now, "sam", paused.ID, nil); err != nil {
		t.Fatal(err)
	}
	// The planner makes what falls due within 10 days: tomorrow's and the
	// next week's.
	p, err := planner.New(planner.Config{Horizon: 10 * 24 * time.Hour, Interval: time.Second, Batch: 10, Grace: time.Hour},
		h.db, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Pass(ctx); err != nil {
		t.Fatal(err)
	}

	// A schedule the planner is behind on by ten weeks (its place at its
	// start): skip_missed, so only what falls due from now counts.
	behind := mk("ursula", "CHF")
	if _, err := h.db.Exec(ctx, `UPDATE schedules SET start_local = $2, last_occurrence = NULL, last_index = 0 WHERE id = $1`,
		behind.ID, now.AddDate(0, 0, -70).Format("2006-01-02")+"T09:00:00"); err != nil {
		t.Fatal(err)
	}
	f, err := loadWeekForecast(ctx, h.db, now)
	if err != nil {
		t.Fatal(err)
	}
	var made, planned, behindPlanned int64
	for _, w := range f.Weeks {
		if w.Currency == "CHF" {
			behindPlanned += w.Planned
			continue
		}
		if w.Currency != "EUR" {
			t.Errorf("a week of %s: %+v (the GBP schedule is paused)", w.Currency, w)
		}
		made, planned = made+w.Made, planned+w.Planned
		if w.MadeAmount != 5000*w.Made || w.PlannedAmount != 5000*w.Planned {
			t.Errorf("amounts of %+v", w)
		}
	}
	// Eight weekly occurrences from tomorrow fall within the eight weeks.
	if made != 2 || planned != 6 || f.Capped {
		t.Errorf("forecast made %d, not made yet %d (capped %v), want 2 and 6: %+v", made, planned, f.Capped, f.Weeks)
	}
	if behindPlanned != 8 {
		t.Errorf("the schedule ten weeks behind counts %d, want the 8 from now (its missed ones are skipped)", behindPlanned)
	}

	viewer := h.as("vera", login.Viewer)
	for _, c := range []struct {
		path string
		code int
		want []string
	}{
		{Prefix + "/schedules", http.StatusOK, []string{weekly.ID.String(), paused.ID.String(), "FREQ=WEEKLY"}},
		{Prefix + "/schedules?state=PAUSED", http.StatusOK, []string{paused.ID.String()}},
		{Prefix + "/schedules?state=BOGUS", http.StatusBadRequest, nil},
		{Prefix + "/schedules?before=x", http.StatusBadRequest, nil},
		{Prefix + "/schedules/" + weekly.ID.String(), http.StatusOK, []string{"Next occurrences", tomorrow, "PENDING", "created", "payer"}},
		{Prefix + "/schedules/" + paused.ID.String(), http.StatusOK, []string{"paused", "None yet."}},
		{Prefix + "/schedules/not-a-uuid", http.StatusBadRequest, nil},
		{Prefix + "/schedules/" + uuid.NewString(), http.StatusNotFound, nil},
	} {
		rec := h.get(viewer, c.path)
		if rec.Code != c.code {
			t.Errorf("GET %s: %d, want %d: %s", c.path, rec.Code, c.code, rec.Body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(rec.Body.String(), w) {
				t.Errorf("GET %s lacks %q", c.path, w)
			}
		}
	}
	if rec := h.get(viewer, Prefix+"/schedules?state=PAUSED"); strings.Contains(rec.Body.String(), weekly.ID.String()) {
		t.Error("the PAUSED filter shows an active schedule")
	}

	// An operator asks to pause it; they cannot approve it themselves,
	// even as an admin; a second admin does; nothing changes meanwhile.
	ask := h.as("olga", login.Admin)
	page := Prefix + "/schedules/" + weekly.ID.String()
	if rec := h.post(viewer, page+"/requests", url.Values{"action": {"PAUSE"}, "reason": {"x"}}); rec.Code != http.StatusForbidden {
		t.Errorf("a viewer asking: %d", rec.Code)
	}
	for _, bad := range []url.Values{{"action": {"DELETE"}, "reason": {"x"}}, {"action": {"PAUSE"}}} {
		if rec := h.post(ask, page+"/requests", bad); rec.Code != http.StatusBadRequest {
			t.Errorf("asking %v: %d", bad, rec.Code)
		}
	}
	if rec := h.post(ask, Prefix+"/schedules/"+paused.ID.String()+"/requests", url.Values{"action": {"PAUSE"}, "reason": {"x"}}); rec.Code != http.StatusConflict {
		t.Errorf("asking to pause a paused schedule: %d", rec.Code)
	}
	if rec := h.post(ask, page+"/requests", url.Values{"action": {"PAUSE"}, "reason": {"the payer asked"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("asking: %d %s", rec.Code, rec.Body)
	}
	reqs, err := h.c.requests.ListScheduleRequests(ctx, weekly.ID)
	if err != nil || len(reqs) != 1 || reqs[0].State != "AWAITING_APPROVAL" {
		t.Fatalf("the request: %+v %v", reqs, err)
	}
	decide := fmt.Sprintf("%s/requests/%d/decide", page, reqs[0].ID)
	if rec := h.post(ask, decide, url.Values{"decision": {"approve"}}); rec.Code != http.StatusConflict {
		t.Errorf("the requester approving: %d", rec.Code)
	}
	if rec := h.post(h.as("ben", login.Admin), decide, url.Values{"decision": {"approve"}}); rec.Code != http.StatusSeeOther {
		t.Errorf("a second admin approving: %d %s", rec.Code, rec.Body)
	}
	if got, _ := h.c.requests.GetScheduleRequest(ctx, reqs[0].ID); got == nil || got.State != "APPROVED" || got.DecidedName != "ben" {
		t.Errorf("after the approval: %+v", got)
	}
	if s, _ := store.GetSchedule(ctx, h.db, "", weekly.ID); s.State != store.ScheduleActive {
		t.Errorf("the console changed the schedule itself: %s", s.State)
	}
	if rec := h.get(viewer, page); !strings.Contains(rec.Body.String(), "APPROVED by ben") {
		t.Error("the schedule's page does not show the approved request")
	}
}
