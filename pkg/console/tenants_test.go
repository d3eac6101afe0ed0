package console

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/console/login"
)

// TestTenantPageAndFourEyesOnLimits: a tenant's page shows what it has
// due now and in the next day; a change of its weight and caps waits for
// a second operator (the requester cannot approve it, nor can a viewer
// ask), and applies only once approved; a rejected one never applies.
func TestTenantPageAndFourEyesOnLimits(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	h.schedule(3, time.Now().Add(-time.Minute), 500)
	h.schedule(4, time.Now().Add(2*time.Hour), 500)
	ada, bea, vic := h.as("ada", login.Admin), h.as("bea", login.Admin), h.as("vic", login.Viewer)
	page := h.get(vic, "/console/tenants/alice").Body.String()
	for _, want := range []string{`<dd id="due">3</dd>`, `<dd id="next24h">4</dd>`, `1 (the default)`} {
		if !strings.Contains(page, want) {
			t.Fatalf("the tenant page lacks %s:\n%s", want, page)
		}
	}
	if list := h.get(vic, "/console/tenants").Body.String(); !strings.Contains(list, `/console/tenants/alice"`) {
		t.Fatalf("the tenants list lacks alice:\n%s", list)
	}
	form := url.Values{"weight": {"5"}, "max_inflight": {"100"}, "reason": {"payroll week"}}
	if rec := h.post(vic, "/console/tenants/alice/limits", form); rec.Code != 403 {
		t.Fatalf("a viewer asked to change limits: %d", rec.Code)
	}
	for _, bad := range []url.Values{{"weight": {"0"}, "reason": {"x"}}, {"weight": {"2"}, "max_rate": {"NaN"}, "reason": {"x"}},
		{"weight": {"2"}}} {
		if rec := h.post(ada, "/console/tenants/alice/limits", bad); rec.Code != 400 {
			t.Fatalf("limits %v: %d, want 400", bad, rec.Code)
		}
	}
	weight := func() int {
		var w int
		if err := h.db.QueryRow(ctx, `SELECT coalesce((SELECT weight FROM tenant_limits WHERE tenant = 'alice'), 1)`).Scan(&w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	ask := func() int64 {
		if rec := h.post(ada, "/console/tenants/alice/limits", form); rec.Code != 303 {
			t.Fatalf("ask: %d %s", rec.Code, rec.Body.String())
		}
		var id int64
		if err := h.db.QueryRow(ctx, `SELECT max(id) FROM tenant_limit_requests`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := ask()
	if weight() != 1 {
		t.Fatal("the limits applied before approval")
	}
	decide := func(l signedIn, id int64, d string) int {
		return h.post(l, fmt.Sprintf("/console/tenants/alice/limits/%d/decide", id), url.Values{"decision": {d}}).Code
	}
	if code := decide(ada, id, "approve"); code != 409 || weight() != 1 {
		t.Fatalf("the requester approved her own change: %d, weight %d", code, weight())
	}
	if page := h.get(ada, "/console/tenants/alice").Body.String(); regexp.MustCompile(`approve-limits-\d+`).MatchString(page) {
		t.Fatal("the requester is offered to approve her own change")
	}
	if page := h.get(bea, "/console/tenants/alice").Body.String(); !strings.Contains(page, fmt.Sprintf(`id="approve-limits-%d"`, id)) {
		t.Fatal("a second admin is not offered to approve the change")
	}
	if code := decide(bea, id, "reject"); code != 303 || weight() != 1 {
		t.Fatalf("reject: %d, weight %d", code, weight())
	}
	if code := decide(bea, id, "approve"); code != 409 {
		t.Fatalf("a rejected change was approved after: %d", code)
	}
	id = ask()
	if code := decide(bea, id, "approve"); code != 303 || weight() != 5 {
		t.Fatalf("approve: %d, weight %d", code, weight())
	}
	var by string
	var inflight int
	if err := h.db.QueryRow(ctx, `SELECT updated_by, max_inflight FROM tenant_limits WHERE tenant = 'alice'`).Scan(&by, &inflight); err != nil ||
		inflight != 100 || !strings.Contains(by, "ada") || !strings.Contains(by, "approved by bea") {
		t.Fatalf("limits by %q in flight %d (%v): want both operators named and the cap set", by, inflight, err)
	}
}

// TestTenantExecutedRate: the tenant page shows the attempts its tenant
// finished in the last sampled interval per second, and a tenant beyond
// the busiest kept shows as under the least of them.
func TestTenantExecutedRate(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	ids := h.schedule(30, time.Now().Add(-time.Minute), 500)
	if _, err := h.db.Exec(ctx, `UPDATE payment_index SET tenant = 'acme' WHERE id = ANY($1)`, ids[:10]); err != nil {
		t.Fatal(err)
	}
	// 20 of alice's and 10 of acme's finished in the last 10 s; one of
	// acme's is still running (no outcome) and does not count.
	if _, err := h.db.Exec(ctx, `INSERT INTO payment_attempts (payment_id, attempt, gateway_key, outcome, started_at)
		SELECT id, 1, id::text, 'SUCCEEDED', now() - interval '3 seconds' FROM unnest($1::uuid[]) AS u(id)`, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Exec(ctx, `UPDATE payment_attempts SET outcome = NULL WHERE payment_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	to := time.Now().Truncate(time.Second).Add(time.Second)
	rates, floor, err := loadTenantRates(ctx, h.db, to.Add(-sampleEvery), to)
	if err != nil || rates["acme"] != 0.9 || rates["alice"] != 2 || floor != 0 {
		t.Fatalf("rates %v floor %v: %v", rates, floor, err)
	}
	h.c.cache.mu.Lock()
	h.c.cache.tenantRates, h.c.cache.tenantRatesAt = rates, to
	h.c.cache.mu.Unlock()
	page := h.get(h.as("vic", login.Viewer), "/console/tenants/acme").Body.String()
	if !strings.Contains(page, `<dd id="executed">0.9 (`) {
		t.Fatalf("the tenant page lacks its rate:\n%s", page)
	}
	h.c.cache.mu.Lock()
	h.c.cache.tenantRateFloor = 2
	h.c.cache.mu.Unlock()
	if page := h.get(h.as("vic", login.Viewer), "/console/tenants/zed").Body.String(); !strings.Contains(page, `<dd id="executed">under 2.0 (`) {
		t.Fatalf("a tenant beyond the kept ones:\n%s", page)
	}
}
