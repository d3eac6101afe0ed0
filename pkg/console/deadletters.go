package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/console/consoledb"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/payment"
)

// The dead letters page and the bulk actions (count first, then a request).

// reasons are the dead-letter reasons the page filters on.
var reasons = payment.Names(payment.DeadReasons...)

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request, v *view) {
	reason := r.URL.Query().Get("reason")
	if reason != "" && !contains(reasons, reason) {
		c.fail(w, r, v, http.StatusBadRequest, fmt.Sprintf("%q is not a dead-letter reason.", clip(reason, 40)))
		return
	}
	afterAt, afterID := time.Unix(0, 0).UTC(), uuid.Nil
	if a := r.URL.Query().Get("after"); a != "" {
		at, id, ok := strings.Cut(a, "_")
		t, e1 := time.Parse(time.RFC3339Nano, at)
		u, e2 := uuid.Parse(id)
		if !ok || e1 != nil || e2 != nil {
			c.fail(w, r, v, http.StatusBadRequest, "The page link is damaged: open the list again.")
			return
		}
		afterAt, afterID = t, u
	}
	ctx := r.Context()
	count, err := consoledb.New(c.db).CountDeadLetters(ctx, consoledb.CountDeadLettersParams{Reason: reason, Max: maxBulk + 1})
	if err != nil {
		c.dbFail(w, r, v, "count dead letters", err)
		return
	}
	n, total := count.N, count.Amount
	// Unfiltered, a page is the index's next rows; by reason, up to scanCap
	// of them are looked at for a page.
	// Only those that have come due, as the count above.
	res, err := walkDead(ctx, c.db, afterAt, afterID, c.now().Add(time.Microsecond), reason != "", func(x Row) bool {
		return reason == "" || x.Reason == reason
	})
	if err != nil {
		c.dbFail(w, r, v, "list dead letters", err)
		return
	}
	list, next := res.Rows, res.Next
	data := map[string]any{"Rows": list, "Reason": reason, "Reasons": reasons, "Count": n, "Capped": n > maxBulk,
		"Total": total, "Actions": actions, "CanAct": v.Session.Role >= login.Operator, "CanBulk": v.Session.Role >= login.Admin}
	if next != "" {
		q := url.Values{"after": {next}}
		if reason != "" {
			q.Set("reason", reason)
		}
		data["NextURL"] = Prefix + "/dead-letters?" + q.Encode()
	}
	v.Title, v.Data = "Dead letters", data
	c.render(w, http.StatusOK, "deadletters.html", v)
}

// selection reads what a dead-letter form asks to act on: the ticked
// ids, or all that match its reason filter.
func (c *Console) selection(ctx context.Context, f url.Values) (Selection, string, string, error) {
	if from := actionFrom[f.Get("action")]; from != payment.DeadLettered {
		// On PENDING or HELD payments: the ticked ones only.
		if f.Get("scope") != "selected" {
			return Selection{}, "", "Tick the payments to act on.", nil
		}
		ids, msg := ticked(f)
		if msg == "" && len(ids) == 0 {
			msg = "Tick the payments to act on."
		}
		if msg != "" {
			return Selection{}, "", msg, nil
		}
		s, err := selectOpen(ctx, c.db, ids, from)
		return s, fmt.Sprintf("%d ticked, %s", len(ids), from), "", err
	}
	reason := f.Get("filter")
	if reason != "" && !contains(reasons, reason) {
		return Selection{}, "", "That is not a dead-letter reason.", nil
	}
	var ids []uuid.UUID
	scope := f.Get("scope")
	switch scope {
	case "selected":
		var msg string
		if ids, msg = ticked(f); msg != "" {
			return Selection{}, "", msg, nil
		}
		if len(ids) == 0 {
			return Selection{}, "", "Tick the payments to act on, or choose all that match.", nil
		}
	case "all":
	default:
		return Selection{}, "", "Choose the ticked payments or all that match.", nil
	}
	s, err := selectDead(ctx, c.db, ids, reason)
	filter := "reason " + reason
	if reason == "" {
		filter = "all dead letters"
	}
	if scope == "selected" {
		filter = fmt.Sprintf("%d ticked", len(ids))
	}
	return s, filter, "", err
}

// ticked reads a form's ticked payment ids (at most a page; none is the
// caller's to refuse); msg says what is wrong with them, for the operator.
func ticked(f url.Values) (ids []uuid.UUID, msg string) {
	if len(f["id"]) > pageSize {
		return nil, "At most one page of payments can be ticked."
	}
	for _, s := range f["id"] {
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, "The form carried a damaged payment id."
		}
		ids = append(ids, id)
	}
	return ids, ""
}

// bulk is a dead-letter form read and checked: the action, its reason and
// what it would act on now.
type bulk struct {
	action, reason, filter string
	runAt                  *time.Time
	sel                    Selection
}

// readBulk reads a dead-letter form; on a mistake it has answered.
func (c *Console) readBulk(ctx context.Context, w http.ResponseWriter, r *http.Request, v *view) (bulk, bool) {
	var b bulk
	var msg string
	if b.action, b.reason, b.runAt, msg = readAction(r.PostForm, c.now()); msg != "" {
		c.fail(w, r, v, http.StatusBadRequest, msg)
		return b, false
	}
	var err error
	b.sel, b.filter, msg, err = c.selection(ctx, r.PostForm)
	switch {
	case err != nil:
		c.dbFail(w, r, v, "select dead letters", err)
	case msg != "":
		c.fail(w, r, v, http.StatusBadRequest, msg)
	case len(b.sel.IDs) == 0:
		c.fail(w, r, v, http.StatusConflict, "Nothing matches (any more): no "+string(actionFrom[b.action])+" payment to act on.")
	case len(b.sel.IDs) > 1 && v.Session.Role < login.Admin:
		c.fail(w, r, v, http.StatusForbidden, "An action on more than one payment needs the admin role.")
	default:
		return b, true
	}
	return b, false
}

// confirm shows what b would do: the count and the amounts, and whether
// a second operator must approve.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, v *view, status int, b bulk) {
	v.Title = "Confirm"
	v.Data = map[string]any{"Action": b.action, "ActionName": actionName(b.action), "Reason": b.reason, "RunAt": b.runAt, "Sel": b.sel,
		"Filter": b.filter, "Form": r.PostForm, "NeedsApproval": c.needsApproval(b.action, b.sel, c.runningFor(r, v))}
	c.render(w, status, "confirm.html", v)
}

// runningFor is the session's running totals for the confirm page; a
// failure to read them says "needs approval" rather than nothing.
func (c *Console) runningFor(r *http.Request, v *view) approval.Running {
	ctx := r.Context()
	rn, err := c.requests.RunningOf(ctx, v.Session.Operator)
	if err != nil {
		return approval.Running{Count: 1 << 30}
	}
	return rn
}

// bulkPreview shows what an action would do before anything is asked.
func (c *Console) bulkPreview(w http.ResponseWriter, r *http.Request, v *view) {
	ctx := r.Context()
	if b, ok := c.readBulk(ctx, w, r, v); ok {
		c.confirm(w, r, v, http.StatusOK, b)
	}
}

// bulkRequest records the confirmed action. What it acts on is selected
// again: if the count changed since the preview, the operator sees the
// new count first.
func (c *Console) bulkRequest(w http.ResponseWriter, r *http.Request, v *view) {
	ctx := r.Context()
	b, ok := c.readBulk(ctx, w, r, v)
	if !ok {
		return
	}
	if want, err := strconv.Atoi(r.PostForm.Get("count")); err != nil || want != len(b.sel.IDs) {
		v.Flash = fmt.Sprintf("The selection changed since you looked: it is now %d payments.", len(b.sel.IDs))
		c.confirm(w, r, v, http.StatusConflict, b)
		return
	}
	id, _, err := c.createRequest(ctx, b.action, b.filter, b.reason, b.runAt, v.Session.Who(), b.sel)
	if err != nil {
		c.dbFail(w, r, v, "create request", err)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/requests/%d", Prefix, id), http.StatusSeeOther)
}
