package console

import (
	"net/http"
	"time"

	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/console/consoledb"
)

// The reconciliation page: runs, their findings, and starting one.

type reconRun struct {
	ID                        int64
	Day                       time.Time
	TriggeredBy, State, Error string
	StartedAt                 time.Time
	FinishedAt                *time.Time
	Charges, Payments         int64
	Repaired, Mismatches      int32
	Kinds                     map[string]int
}

func (c *Console) reconPage(w http.ResponseWriter, r *http.Request, v *view) {
	ctx := r.Context()
	q := consoledb.New(c.db)
	got, err := q.ReconRuns(ctx)
	if err != nil {
		c.dbFail(w, r, v, "list runs", err)
		return
	}
	var runs []*reconRun
	var ids []int64
	for _, x := range got {
		runs = append(runs, &reconRun{ID: x.ID, Day: x.Day, TriggeredBy: x.TriggeredBy, State: x.State, Error: x.Error,
			StartedAt: x.StartedAt, FinishedAt: x.FinishedAt, Charges: x.Charges, Payments: x.Payments, Repaired: x.Repaired,
			Mismatches: x.Mismatches, Kinds: map[string]int{}})
		ids = append(ids, x.ID)
	}
	if len(ids) > 0 {
		kinds, err := q.ReconKinds(ctx, ids)
		if err != nil {
			c.dbFail(w, r, v, "run items", err)
			return
		}
		at := map[int64]*reconRun{}
		for _, x := range runs {
			at[x.ID] = x
		}
		for _, k := range kinds {
			at[k.RunID].Kinds[k.Kind] = int(k.N)
		}
	}
	v.Title = "Reconciliation"
	v.Data = map[string]any{"Runs": runs, "Yesterday": c.now().UTC().AddDate(0, 0, -1).Format("2006-01-02")}
	for _, x := range runs {
		if x.State == "RUNNING" {
			v.Refresh = 5
		}
	}
	c.render(w, http.StatusOK, "recon.html", v)
}

func (c *Console) reconStart(w http.ResponseWriter, r *http.Request, v *view) {
	day, err := time.Parse("2006-01-02", r.PostForm.Get("day"))
	now := c.now().UTC()
	if err != nil || day.After(now) || day.Before(now.AddDate(-1, 0, 0)) {
		c.fail(w, r, v, http.StatusBadRequest, "Choose a day (YYYY-MM-DD) within the last year, not in the future.")
		return
	}
	if err := c.actions.Reconcile(r.Context(), v.Session.Name, day); err != nil {
		if apierr.Reason(err) == apierr.ReasonRunInProgress {
			c.fail(w, r, v, http.StatusConflict, "A run of "+day.Format("2006-01-02")+" is already running: wait for it to finish (this page shows it RUNNING).")
			return
		}
		c.fail(w, r, v, http.StatusConflict, "The run did not start: "+actionError(err))
		return
	}
	c.log.Info("console: reconciliation started", "day", day.Format("2006-01-02"), "operator", v.Session.Name)
	http.Redirect(w, r, Prefix+"/reconciliation", http.StatusSeeOther)
}
