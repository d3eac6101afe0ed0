package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// The webhook pages: a tenant's endpoints (on its page), one endpoint with
// its delivery log, a payment's deliveries (on its page and timeline), and
// resend and recover, for operators.

// msgID is what a webhook-id looks like here (a CloudEvent id).
var msgID = regexp.MustCompile(`^[A-Za-z0-9_:-]{1,200}$`)

// logSize bounds the attempts a delivery log shows.
const logSize = 100

// sentDelivery is one delivery of a payment's notification, with its
// attempts (newest first).
type sentDelivery struct {
	Endpoint uuid.UUID
	URL      string
	MsgID    string
	Type     string
	State    string
	Attempts []tenanthook.DeliveryAttempt
}

// paymentDeliveries reads the deliveries of payment id's notifications,
// grouped, and the timeline entries of their attempts.
func (c *Console) paymentDeliveries(ctx context.Context, id uuid.UUID) ([]sentDelivery, []timelineEntry, error) {
	log, err := tenanthook.Attempts(ctx, c.hooks(), "", &id, nil, logSize)
	if err != nil {
		return nil, nil, err
	}
	var out []sentDelivery
	at := map[int64]int{}
	var tl []timelineEntry
	for _, a := range log {
		i, ok := at[a.Delivery]
		if !ok {
			i = len(out)
			at[a.Delivery] = i
			out = append(out, sentDelivery{Endpoint: a.Endpoint, URL: a.URL, MsgID: a.MsgID, Type: a.Type, State: a.State})
		}
		out[i].Attempts = append(out[i].Attempts, a)
		tl = append(tl, timelineEntry{At: a.At, What: fmt.Sprintf("webhook %s to %s, attempt %d: %s in %d ms", a.Type, a.URL, a.N,
			attemptStatus(a.Status), a.LatencyMs), Error: a.Error})
	}
	return out, tl, nil
}

// attemptStatus says what an attempt got back.
func attemptStatus(s *int) string {
	if s == nil {
		return "no answer"
	}
	return "HTTP " + strconv.Itoa(*s)
}

// endpointPage is one endpoint: its settings and state, its delivery log,
// and (operators) resend and recover.
func (c *Console) endpointPage(w http.ResponseWriter, r *http.Request, v *view) {
	id, ok := c.pathUUID(w, r, v, fmt.Sprintf("%q is not an endpoint id.", clip(r.PathValue("id"), 60)))
	if !ok {
		return
	}
	ctx := r.Context()
	ep, ok := c.endpoint(ctx, w, r, v, id)
	if !ok {
		return
	}
	log, err := tenanthook.Attempts(ctx, c.hooks(), "", nil, &id, logSize)
	if err != nil {
		c.dbFail(w, r, v, "read delivery log", err)
		return
	}
	reqs, err := c.requests.EndpointRequestsOf(ctx, id)
	if err != nil {
		c.dbFail(w, r, v, "read endpoint requests", err)
		return
	}
	v.Title = "Webhook endpoint " + ep.URL
	data := map[string]any{"E": ep, "Log": log, "CanAct": v.Session.Role >= login.Operator, "Requests": reqs,
		"CanDecide": v.Session.Role >= login.Admin, "Me": v.Session.Operator}
	// What the last resend or recover did (the redirect says; shown only
	// when it reads as such).
	if n, err := strconv.Atoi(r.URL.Query().Get("recovered")); err == nil && n >= 0 {
		data["Recovered"] = strconv.Itoa(n)
	}
	if n, err := strconv.ParseInt(r.URL.Query().Get("requested"), 10, 64); err == nil && n > 0 {
		data["Requested"] = "endpoints/" + strconv.FormatInt(n, 10)
	}
	if m := r.URL.Query().Get("resent"); msgID.MatchString(m) {
		data["Resent"] = m
	}
	v.Data = data
	c.render(w, http.StatusOK, "endpoint.html", v)
}

// resendWebhook makes one message due again to one endpoint now.
func (c *Console) resendWebhook(w http.ResponseWriter, r *http.Request, v *view) {
	id, ok := c.pathUUID(w, r, v, "That is not an endpoint id.")
	if !ok {
		return
	}
	msg := strings.TrimSpace(r.PostForm.Get("msg"))
	if !msgID.MatchString(msg) {
		c.fail(w, r, v, http.StatusBadRequest, "Say which message to send again (its webhook-id).")
		return
	}
	ctx := r.Context()
	switch err := tenanthook.Resend(ctx, c.hooks(), "", id, msg); {
	case errors.Is(err, tenanthook.ErrNotFound):
		c.fail(w, r, v, http.StatusConflict, "That endpoint never had this message, or it is being attempted right now.")
		return
	case err != nil:
		c.dbFail(w, r, v, "resend", err)
		return
	}
	c.log.Info("console: webhook resent", "operator", v.Session.Who(), "endpoint", id, "msg", msg)
	back := Prefix + "/webhooks/" + id.String() + "?resent=" + url.QueryEscape(msg)
	if p, err := uuid.Parse(r.PostForm.Get("payment")); err == nil {
		back = Prefix + "/payments/" + p.String()
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// recoverWebhooks makes every undelivered message to one endpoint since a
// time (until another, if given) due again now.
func (c *Console) recoverWebhooks(w http.ResponseWriter, r *http.Request, v *view) {
	id, ok := c.pathUUID(w, r, v, "That is not an endpoint id.")
	if !ok {
		return
	}
	since, err := parseDate(r.PostForm.Get("since"))
	if err != nil || since.IsZero() {
		c.fail(w, r, v, http.StatusBadRequest, "Since is a date and time, YYYY-MM-DDTHH:MM (UTC).")
		return
	}
	var until *time.Time
	if s := r.PostForm.Get("until"); strings.TrimSpace(s) != "" {
		t, err := parseDate(s)
		if err != nil {
			c.fail(w, r, v, http.StatusBadRequest, "Until is a date and time, YYYY-MM-DDTHH:MM (UTC), or blank.")
			return
		}
		until = &t
	}
	ctx := r.Context()
	if !c.requests.Policy().Single[approval.Recover] {
		// This deployment's policy wants a second admin for it.
		c.requestRecover(w, r, v, id, since, until)
		return
	}
	n, err := tenanthook.Recover(ctx, c.hooks(), "", id, since, until)
	switch {
	case errors.Is(err, tenanthook.ErrInvalid):
		c.fail(w, r, v, http.StatusBadRequest, "Until must be after since.")
		return
	case errors.Is(err, tenanthook.ErrNotFound):
		c.fail(w, r, v, http.StatusNotFound, "No webhook endpoint has the id "+id.String()+".")
		return
	case err != nil:
		c.dbFail(w, r, v, "recover", err)
		return
	}
	c.log.Info("console: webhooks recovered", "operator", v.Session.Who(), "endpoint", id, "since", since, "count", n)
	http.Redirect(w, r, fmt.Sprintf("%s/webhooks/%s?recovered=%d", Prefix, id, n), http.StatusSeeOther)
}

// endpoint reads endpoint id; none, or a database failure, is answered
// here (ok false).
func (c *Console) endpoint(ctx context.Context, w http.ResponseWriter, r *http.Request, v *view, id uuid.UUID) (tenanthook.Endpoint, bool) {
	ep, err := tenanthook.GetEndpoint(ctx, c.hooks(), id)
	if errors.Is(err, tenanthook.ErrNotFound) {
		c.fail(w, r, v, http.StatusNotFound, "No webhook endpoint has the id "+id.String()+".")
		return ep, false
	}
	if err != nil {
		c.dbFail(w, r, v, "read endpoint", err)
		return ep, false
	}
	return ep, true
}

// hooks is the webhooks' database.
func (c *Console) hooks() pgdb.DB {
	if c.cfg.HooksDB != nil {
		return c.cfg.HooksDB
	}
	return c.db
}

// requestRecover records a recovery for a second admin (payctl requests
// approve endpoints/<id>), when the policy does not let one take it.
func (c *Console) requestRecover(w http.ResponseWriter, r *http.Request, v *view, id uuid.UUID, since time.Time, until *time.Time) {
	if until != nil && !until.After(since) {
		c.fail(w, r, v, http.StatusBadRequest, "Until must be after since.")
		return
	}
	ctx := r.Context()
	if _, ok := c.endpoint(ctx, w, r, v, id); !ok {
		return
	}
	rid, err := c.requests.RequestEndpoint(ctx, approval.EndpointRequest{Action: approval.Recover, EndpointID: id, Since: &since, Until: until,
		Reason: "recover the failed messages (console)"}, approval.Identity(v.Session.Who()))
	if err != nil {
		c.dbFail(w, r, v, "request recover", err)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/webhooks/%s?requested=%d", Prefix, id, rid), http.StatusSeeOther)
}

// decideEndpointRequest approves (and applies) or rejects a request on
// this endpoint, as a second admin. An approved rotation shows its new
// secret here, once: it is never stored with the request.
func (c *Console) decideEndpointRequest(w http.ResponseWriter, r *http.Request, v *view) {
	id, rid, approve, ok := c.resourceDecision(w, r, v, "That is not a request of an endpoint.")
	if !ok {
		return
	}
	ctx := r.Context()
	if q, err := c.requests.GetEndpoint(ctx, rid); errors.Is(err, approval.ErrNotFound) || (err == nil && q.EndpointID != id) {
		c.fail(w, r, v, http.StatusNotFound, "This endpoint has no such request.")
		return
	} else if err != nil {
		c.dbFail(w, r, v, "read endpoint request", err)
		return
	}
	q, secret, err := c.requests.DecideEndpoint(ctx, rid, approve, approval.Identity(v.Session.Who()), approval.ApplyEndpoint(c.hooks()))
	if q == nil {
		if errors.Is(err, approval.ErrOwnRequest) || errors.Is(err, approval.ErrNotAwaiting) {
			c.fail(w, r, v, http.StatusConflict, "Not decided: "+err.Error()+".")
			return
		}
		c.dbFail(w, r, v, "decide endpoint request", err)
		return
	}
	c.log.Info("console: endpoint request decided", "request", rid, "state", q.State, "operator", v.Session.Name)
	if secret == "" {
		http.Redirect(w, r, fmt.Sprintf("%s/webhooks/%s", Prefix, id), http.StatusSeeOther)
		return
	}
	// The new secret, shown this once to the approver, who hands it to the
	// tenant: the page is not cached (secureHeaders).
	v.Title = "New signing secret"
	v.Data = map[string]any{"Endpoint": id.String(), "Secret": secret, "Request": rid}
	c.render(w, http.StatusOK, "secret.html", v)
}

// resourceDecision reads a decision on one of a resource's requests (an
// endpoint's, a schedule's): the resource's id and the request's number
// from the path, and approve or reject from the form; it answers the
// client's mistake itself (bad says what was not understood).
func (c *Console) resourceDecision(w http.ResponseWriter, r *http.Request, v *view, bad string) (uuid.UUID, int64, bool, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	rid, rerr := strconv.ParseInt(r.PathValue("rid"), 10, 64)
	if err != nil || rerr != nil || rid <= 0 {
		c.fail(w, r, v, http.StatusBadRequest, bad)
		return uuid.Nil, 0, false, false
	}
	approve, ok := c.decision(w, r, v)
	return id, rid, approve, ok
}
