package console

// The operators' actions page: every move made outside the execution path
// (payment_actions: operators through payctl, the API and this console,
// the reconciler's repairs, the resolver, the gateway's webhooks), newest
// first, filtered by who, what and since when. Bounded like a search: a
// page looks at most actionsScan rows back from its cursor.

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/console/consoledb"
)

const actionsScan = 5000

type actionRow struct {
	ID                      int64
	At                      time.Time
	Payment                 uuid.UUID
	Actor, Action, From, To string
	Reason                  string
}

func (c *Console) actionsPage(w http.ResponseWriter, r *http.Request, v *view) {
	q := r.URL.Query()
	actor, action := strings.TrimSpace(q.Get("actor")), strings.ToUpper(strings.TrimSpace(q.Get("action")))
	if len(actor) > 200 || len(action) > 40 {
		c.fail(w, r, v, http.StatusBadRequest, "The filters are too long.")
		return
	}
	since := time.Unix(0, 0).UTC()
	if s := q.Get("since"); s != "" {
		t, err := parseDate(s)
		if err != nil {
			c.fail(w, r, v, http.StatusBadRequest, "Since is a date and time, YYYY-MM-DDTHH:MM (UTC).")
			return
		}
		since = t
	}
	before, ok := c.beforeParam(w, r, v, 1<<63-1)
	if !ok {
		return
	}
	ctx := r.Context()
	db := consoledb.New(c.db)
	rows, err := db.Actions(ctx, consoledb.ActionsParams{Before: before, Actor: actor, Action: action, Since: since,
		Max: pageSize, Scan: actionsScan})
	if err != nil {
		c.dbFail(w, r, v, "list actions", err)
		return
	}
	var list []actionRow
	for _, x := range rows {
		list = append(list, actionRow{ID: x.ID, At: x.At, Payment: x.PaymentID, Actor: x.Actor, Action: x.Action,
			From: x.PrevStatus, To: x.NewStatus, Reason: x.Reason})
	}
	// Where the next page starts: after the last row shown when the page
	// is full, else after what this page looked at (if it looked at a
	// whole scan: there may be more further back).
	next := int64(0)
	switch {
	case len(list) == pageSize:
		next = list[len(list)-1].ID
	default:
		l, err := db.ActionsLooked(ctx, consoledb.ActionsLookedParams{Before: before, Scan: actionsScan})
		if low, ok := l.Least.(int64); err == nil && l.N == actionsScan && ok {
			next = low
		}
	}
	data := map[string]any{"Rows": list, "Form": q}
	if next > 0 {
		nq := url.Values{"actor": {actor}, "action": {action}, "since": {q.Get("since")}, "before": {strconv.FormatInt(next, 10)}}
		data["NextURL"] = Prefix + "/actions?" + nq.Encode()
	}
	v.Title, v.Data = "Actions", data
	c.render(w, http.StatusOK, "actions.html", v)
}
