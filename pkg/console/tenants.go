package console

// Tenants: the list (by name, as the admin API's), one tenant's page (due
// now and in the next day, lateness, in flight, when the sweepers next
// look at it, weight and caps, recent dead letters), and changes of its
// weight and caps, which a second operator must approve.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/console/consoledb"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/store"
)

func (c *Console) tenantsPage(w http.ResponseWriter, r *http.Request, v *view) {
	after := r.URL.Query().Get("after")
	if len(after) > 256 {
		c.fail(w, r, v, http.StatusBadRequest, "The page link is damaged: open the list again.")
		return
	}
	ctx := r.Context()
	list, next, err := store.ListTenants(ctx, c.db, after, pageSize)
	if err != nil {
		c.dbFail(w, r, v, "list tenants", err)
		return
	}
	data := map[string]any{"Tenants": list}
	if next != "" {
		data["NextURL"] = Prefix + "/tenants?" + url.Values{"after": {next}}.Encode()
	}
	v.Title, v.Data = "Tenants", data
	c.render(w, http.StatusOK, "tenants.html", v)
}

// limitRequest is a change of a tenant's limits waiting for, or given, a
// second operator's word.
type limitRequest struct {
	ID                       int64
	Weight                   int
	MaxInflight              *int
	MaxRate                  *float64
	Reason, State            string
	RequestedBy, RequestedAs string
	DecidedAs                string
	RequestedAt              time.Time
}

func (c *Console) tenantPage(w http.ResponseWriter, r *http.Request, v *view) {
	tenant := r.PathValue("tenant")
	if err := auth.CheckTenant(tenant); err != nil {
		c.fail(w, r, v, http.StatusBadRequest, "That is not a tenant name: "+err.Error()+".")
		return
	}
	ctx := r.Context()
	d, err := store.ReadTenant(ctx, c.db, tenant)
	if err != nil {
		c.dbFail(w, r, v, "read tenant", err)
		return
	}
	dead, err := consoledb.New(c.db).TenantDeadLetters(ctx, consoledb.TenantDeadLettersParams{Tenant: tenant,
		DueBound: store.DueBound(time.Now())})
	if err != nil {
		c.dbFail(w, r, v, "tenant dead letters", err)
		return
	}
	deadRows := rowsOf(dead)
	reqs, err := c.limitRequests(ctx, tenant)
	if err != nil {
		c.dbFail(w, r, v, "limit requests", err)
		return
	}
	endpoints, err := tenanthook.ListEndpoints(ctx, c.hooks(), tenant)
	if err != nil {
		c.dbFail(w, r, v, "webhook endpoints", err)
		return
	}
	v.Title = "Tenant " + tenant
	rate, rated := c.cache.tenantRate(tenant)
	v.Data = map[string]any{"T": d, "Dead": deadRows, "Requests": reqs, "CanEdit": v.Session.Role >= login.Admin,
		"Me": v.Session.Operator, "Rate": rate, "Rated": rated, "Endpoints": endpoints}
	c.render(w, http.StatusOK, "tenant.html", v)
}

func (c *Console) limitRequests(ctx context.Context, tenant string) ([]limitRequest, error) {
	rows, err := consoledb.New(c.db).LimitRequests(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("limit requests: %w", err)
	}
	out := make([]limitRequest, len(rows))
	for i, r := range rows {
		out[i] = limitRequest{ID: r.ID, Weight: int(r.Weight), MaxRate: r.MaxRate, Reason: r.Reason, State: r.State,
			RequestedBy: r.RequestedBy, RequestedAs: r.RequestedName, DecidedAs: r.DecidedName, RequestedAt: r.RequestedAt}
		if r.MaxInflight != nil {
			n := int(*r.MaxInflight)
			out[i].MaxInflight = &n
		}
	}
	return out, nil
}

// readLimits reads a limits form: weight 1..1000, caps blank (the
// sweepers' default) or positive, and a reason.
func readLimits(f url.Values) (weight int, inflight *int, rate *float64, reason, msg string) {
	weight, err := strconv.Atoi(strings.TrimSpace(f.Get("weight")))
	if err != nil || weight < 1 || weight > 1000 {
		return 0, nil, nil, "", "The weight is a whole number from 1 to 1000."
	}
	if s := strings.TrimSpace(f.Get("max_inflight")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return 0, nil, nil, "", "The in-flight cap is a whole number above 0, or blank for the sweepers' default."
		}
		inflight = &n
	}
	if s := strings.TrimSpace(f.Get("max_rate")); s != "" {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || x <= 0 || x > 1_000_000 || math.IsNaN(x) {
			return 0, nil, nil, "", "The rate cap is a number of claims per second above 0 (at most 1,000,000), or blank for the sweepers' default."
		}
		rate = &x
	}
	reason = strings.TrimSpace(f.Get("reason"))
	if reason == "" || !utf8.ValidString(reason) || utf8.RuneCountInString(reason) > 300 ||
		strings.ContainsFunc(reason, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return 0, nil, nil, "", "A reason is required: one line of at most 300 characters."
	}
	return weight, inflight, rate, reason, ""
}

// requestLimits records a change of a tenant's limits; it applies only
// once a second operator approves it.
func (c *Console) requestLimits(w http.ResponseWriter, r *http.Request, v *view) {
	tenant := r.PathValue("tenant")
	if err := auth.CheckTenant(tenant); err != nil {
		c.fail(w, r, v, http.StatusBadRequest, "That is not a tenant name: "+err.Error()+".")
		return
	}
	weight, inflight, rate, reason, msg := readLimits(r.PostForm)
	if msg != "" {
		c.fail(w, r, v, http.StatusBadRequest, msg)
		return
	}
	ctx := r.Context()
	who := v.Session.Who()
	if _, err := c.requests.RequestLimits(ctx, store.TenantLimits{Tenant: tenant, Weight: weight, MaxInflight: inflight, MaxRate: rate},
		reason, approval.Identity(who)); err != nil {
		c.dbFail(w, r, v, "request limits", err)
		return
	}
	c.log.Info("console: tenant limits requested", "tenant", tenant, "weight", weight, "operator", who.Name, "identity", who.Operator)
	http.Redirect(w, r, Prefix+"/tenants/"+url.PathEscape(tenant), http.StatusSeeOther)
}

// decided answers a decision that was not made (false), err its
// error: one the request did not allow (not awaiting approval, the
// decider's own, or none such) is a conflict, any other a database
// failure (what).
func (c *Console) decided(w http.ResponseWriter, r *http.Request, v *view, err error, what string) bool {
	if errors.Is(err, approval.ErrNotFound) || errors.Is(err, approval.ErrOwnRequest) || errors.Is(err, approval.ErrNotAwaiting) {
		c.fail(w, r, v, http.StatusConflict, "Not decided: it is not awaiting approval, or it is your own request: a second operator must decide.")
		return false
	}
	if err != nil {
		c.dbFail(w, r, v, what, err)
		return false
	}
	return true
}

// decideLimits applies (or rejects) a request, the limits written in the
// same transaction as the decision.
func (c *Console) decideLimits(w http.ResponseWriter, r *http.Request, v *view) {
	tenant := r.PathValue("tenant")
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || auth.CheckTenant(tenant) != nil {
		c.fail(w, r, v, http.StatusBadRequest, "That is not a request.")
		return
	}
	approve, ok := c.decision(w, r, v)
	if !ok {
		return
	}
	ctx := r.Context()
	by := v.Session.Who()
	if !c.decided(w, r, v, c.requests.DecideLimits(ctx, id, tenant, approve, approval.Identity(by)), "decide limits") {
		return
	}
	c.log.Info("console: tenant limits decided", "tenant", tenant, "request", id, "approved", approve, "operator", by.Name, "identity", by.Operator)
	http.Redirect(w, r, Prefix+"/tenants/"+url.PathEscape(tenant), http.StatusSeeOther)
}
