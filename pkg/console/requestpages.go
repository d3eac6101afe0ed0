package console

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/paysched/paysched/pkg/console/login"
)

// The requests pages: the list, one request, and its decision.

func (c *Console) requestsPage(w http.ResponseWriter, r *http.Request, v *view) {
	ctx := r.Context()
	list, err := c.listRequests(ctx)
	if err != nil {
		c.dbFail(w, r, v, "list requests", err)
		return
	}
	names := map[string]string{}
	for a := range actionFrom {
		names[a] = actionName(a) + " (" + string(actionFrom[a]) + ")"
	}
	v.Title, v.Data = "Requests", map[string]any{"Requests": list, "Actions": names}
	for _, q := range list {
		if q.State == "RUNNING" || q.State == "APPROVED" {
			v.Refresh = 2
		}
	}
	c.render(w, http.StatusOK, "requests.html", v)
}

func (c *Console) requestPage(w http.ResponseWriter, r *http.Request, v *view) {
	id, ok := c.pathNumber(w, r, v, "id", "That is not a request number.")
	if !ok {
		return
	}
	ctx := r.Context()
	q, err := c.request(ctx, id)
	if errors.Is(err, errNotFound) {
		c.fail(w, r, v, http.StatusNotFound, fmt.Sprintf("There is no request #%d.", id))
		return
	}
	if err != nil {
		c.dbFail(w, r, v, "read request", err)
		return
	}
	if q.State == "RUNNING" || q.State == "APPROVED" {
		v.Refresh = 1
	}
	shown := q.IDs
	if len(shown) > 100 {
		shown = shown[:100]
	}
	v.Title = fmt.Sprintf("Request #%d", id)
	v.Data = map[string]any{"R": q, "ActionName": actionName(q.Action) + " (" + string(actionFrom[q.Action]) + ")", "Shown": shown,
		"CanDecide": v.Session.Role >= login.Admin && q.State == "AWAITING_APPROVAL" && q.RequestedBy != v.Session.Operator,
		"Own":       q.RequestedBy == v.Session.Operator}
	c.render(w, http.StatusOK, "request.html", v)
}

func (c *Console) decide(w http.ResponseWriter, r *http.Request, v *view) {
	id, ok := c.pathNumber(w, r, v, "id", "That is not a request number.")
	if !ok {
		return
	}
	approve, ok := c.decision(w, r, v)
	if !ok {
		return
	}
	ctx := r.Context()
	if err := c.decideRequest(ctx, id, approve, v.Session.Who()); err != nil {
		c.fail(w, r, v, http.StatusConflict, "Not decided: "+err.Error()+".")
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/requests/%d", Prefix, id), http.StatusSeeOther)
}

// decision reads a decide form's choice: approve (true) or reject; any
// other answer is refused (400) and ok is false.
func (c *Console) decision(w http.ResponseWriter, r *http.Request, v *view) (approve, ok bool) {
	switch r.PostForm.Get("decision") {
	case "approve":
		return true, true
	case "reject":
		return false, true
	}
	c.fail(w, r, v, http.StatusBadRequest, "Approve or reject.")
	return false, false
}
