package console

import (
	"net/http"
	"time"

	"github.com/paysched/paysched/pkg/api/apierr"
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
	ctx, cancel := c.ctx(r)
	defer cancel()
	rows, err := c.db.Query(ctx, reconRunsSQL)
	if err != nil {
		c.dbFail(w, r, v, "list runs", err)
		return
	}
	var runs []*reconRun
	var ids []int64
	for rows.Next() {
		var x reconRun
		if err := rows.Scan(&x.ID, &x.Day, &x.TriggeredBy, &x.State, &x.StartedAt, &x.FinishedAt, &x.Charges, &x.Payments,
			&x.Repaired, &x.Mismatches, &x.Error); err != nil {
			rows.Close()
			c.dbFail(w, r, v, "list runs", err)
			return
		}
		x.Kinds = map[string]int{}
		runs, ids = append(runs, &x), append(ids, x.ID)
	}
	rows.Close()
	if len(ids) > 0 {
		krows, err := c.db.Query(ctx, reconKindsSQL, ids)
		if err != nil {
			c.dbFail(w, r, v, "run items", err)
			return
		}
		at := map[int64]*reconRun{}
		for _, x := range runs {
			at[x.ID] = x
		}
		for krows.Next() {
			var id int64
			var kind string
			var n int
			if err := krows.Scan(&id, &kind, &n); err != nil {
				krows.Close()
				c.dbFail(w, r, v, "run items", err)
				return
			}
			at[id].Kinds[kind] = n
		}
		krows.Close()
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
