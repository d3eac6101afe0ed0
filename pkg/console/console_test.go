package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeActions records what the console asked; a payment in refuse is
// refused as the admin service refuses a charged one.
type fakeActions struct {
	mu     sync.Mutex
	calls  []string
	refuse map[uuid.UUID]bool
}

func (f *fakeActions) do(kind, op string, id uuid.UUID, note string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s %s %s", kind, op, id, note))
	if f.refuse[id] {
		return status.Error(codes.FailedPrecondition, "the gateway holds charge ch_1 for it")
	}
	return nil
}
func (f *fakeActions) Redrive(_ context.Context, op string, id uuid.UUID, _ int32, note string) error {
	return f.do("REDRIVE", op, id, note)
}
func (f *fakeActions) Resolve(_ context.Context, op string, id uuid.UUID, _ int32, note string) error {
	return f.do("RESOLVE", op, id, note)
}
func (f *fakeActions) Cancel(_ context.Context, op string, id uuid.UUID, _ int32, note string) error {
	return f.do("CANCEL", op, id, note)
}
func (f *fakeActions) Hold(_ context.Context, op string, id uuid.UUID, _ int32, note string) error {
	return f.do("HOLD", op, id, note)
}
func (f *fakeActions) Release(_ context.Context, op string, id uuid.UUID, _ int32, note string) error {
	return f.do("RELEASE", op, id, note)
}
func (f *fakeActions) CancelOpen(_ context.Context, op string, id uuid.UUID, from payment.Status, _ int32, note string) error {
	return f.do("CANCEL_"+string(from), op, id, note)
}
func (f *fakeActions) Reschedule(_ context.Context, op string, id uuid.UUID, _ int32, at time.Time, note string) error {
	return f.do("RESCHEDULE "+at.UTC().Format(time.RFC3339), op, id, note)
}
func (f *fakeActions) RunNow(_ context.Context, op string, id uuid.UUID, _ int32, note string) error {
	return f.do("RUN_NOW", op, id, note)
}
func (f *fakeActions) Reconcile(context.Context, string, time.Time) error { return nil }
func (f *fakeActions) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

type harness struct {
	// payers > 0 spreads the payments over payers alice-0..alice-<payers-1>.
	payers int
	t      *testing.T
	c      *Console
	db     *pgxpool.Pool
	acts   *fakeActions
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	db := pgtest.NewPool(t)
	cfg.Dev = true
	cfg.SessionKey = []byte(strings.Repeat("k", 32))
	acts := &fakeActions{refuse: map[uuid.UUID]bool{}}
	c, err := New(context.Background(), cfg, db, acts, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, c: c, db: db, acts: acts}
}

// signedIn is a session cookie and its CSRF token.
type signedIn struct {
	ck   *http.Cookie
	csrf string
}

func (h *harness) as(name string, role login.Role) signedIn {
	rec := httptest.NewRecorder()
	if err := h.c.login.Start(context.Background(), rec, login.DevIdentity(name), role, "dev", ""); err != nil {
		h.t.Fatal(err)
	}
	ck := rec.Result().Cookies()[0]
	sid, ok := h.c.login.SessionID(ck.Value)
	if !ok {
		h.t.Fatal("session does not open")
	}
	return signedIn{ck: ck, csrf: h.c.login.CSRF(sid)}
}

func (h *harness) get(l signedIn, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if l.ck != nil {
		req.AddCookie(l.ck)
	}
	rec := httptest.NewRecorder()
	h.c.ServeHTTP(rec, req)
	return rec
}

// post sends a form with the session's CSRF token (unless form has one).
func (h *harness) post(l signedIn, path string, form url.Values, hdr ...string) *httptest.ResponseRecorder {
	form = cloneForm(form)
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", l.csrf)
	}
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if l.ck != nil {
		req.AddCookie(l.ck)
	}
	rec := httptest.NewRecorder()
	h.c.ServeHTTP(rec, req)
	return rec
}

func cloneForm(f url.Values) url.Values {
	out := url.Values{}
	for k, v := range f {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// schedule creates n payments due at due, payer alice, payees bob-<i>.
func (h *harness) schedule(n int, due time.Time, amount int64) []uuid.UUID {
	h.t.Helper()
	st := store.NewStore(h.db)
	var ids []uuid.UUID
	for start := 0; start < n; start += 1000 {
		var items []store.NewPayment
		for i := start; i < min(n, start+1000); i++ {
			id, _ := uuid.NewV7()
			payer := "alice"
			if h.payers > 0 {
				payer = fmt.Sprint("alice-", i%h.payers)
			}
			items = append(items, store.NewPayment{ID: id, Payer: payer, Payee: fmt.Sprint("bob-", i%50), Amount: amount,
				Currency: "EUR", DueAt: due, CreatedAt: time.Now(), IdempotencyKey: "k-" + id.String(),
				RequestHash: []byte{1}, Response: []byte{1}, Tenant: "alice"})
			ids = append(ids, id)
		}
		if _, err := st.Create(context.Background(), items); err != nil {
			h.t.Fatal(err)
		}
	}
	return ids
}

func (h *harness) deadLetter(ids []uuid.UUID) {
	h.t.Helper()
	if _, err := h.db.Exec(context.Background(), `UPDATE payments SET status = 'DEAD_LETTERED', dead_letter_reason = 'RETRIES_EXHAUSTED',
		attempt = 1 WHERE id = ANY($1)`, ids); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) requestState(id int64) *Request {
	h.t.Helper()
	r, err := h.c.request(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

var requestLoc = regexp.MustCompile(`/console/requests/(\d+)$`)

func requestID(t *testing.T, rec *httptest.ResponseRecorder) int64 {
	t.Helper()
	m := requestLoc.FindStringSubmatch(rec.Header().Get("Location"))
	if rec.Code != http.StatusSeeOther || m == nil {
		t.Fatalf("want a redirect to a request, got %d %q: %s", rec.Code, rec.Header().Get("Location"), rec.Body.String())
	}
	var id int64
	_, _ = fmt.Sscan(m[1], &id)
	return id
}

// Each role reaches what it may and is refused the rest, with 403.
func TestRoles(t *testing.T) {
	h := newHarness(t, Config{})
	ids := h.schedule(3, time.Now().Add(-time.Minute), 500)
	h.deadLetter(ids)
	viewer, operator, admin := h.as("vera", login.Viewer), h.as("otto", login.Operator), h.as("ada", login.Admin)
	for _, p := range []string{"/console/", "/console/payments?payer=alice", "/console/payments/" + ids[0].String(),
		"/console/dead-letters", "/console/requests", "/console/reconciliation", "/console/gateway"} {
		if rec := h.get(viewer, p); rec.Code != http.StatusOK {
			t.Fatalf("viewer GET %s: %d %s", p, rec.Code, rec.Body.String())
		}
	}
	if rec := h.get(viewer, "/console/"); strings.Count(rec.Body.String(), `<svg class="chart"`) < 2 {
		t.Fatal("the overview draws no charts")
	}
	if rec := h.get(signedIn{}, "/console/"); rec.Code != http.StatusSeeOther || !strings.HasPrefix(rec.Header().Get("Location"), "/console/login") {
		t.Fatalf("no session: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	one := url.Values{"action": {"REDRIVE"}, "reason": {"psp back"}}
	if rec := h.post(viewer, "/console/payments/"+ids[0].String()+"/action", one); rec.Code != http.StatusForbidden {
		t.Fatalf("viewer acting: %d", rec.Code)
	}
	if rec := h.post(operator, "/console/payments/"+ids[0].String()+"/action", one); rec.Code != http.StatusSeeOther {
		t.Fatalf("operator acting on one: %d %s", rec.Code, rec.Body.String())
	}
	two := url.Values{"action": {"REDRIVE"}, "reason": {"psp back"}, "scope": {"selected"}, "id": {ids[1].String(), ids[2].String()}, "count": {"2"}}
	if rec := h.post(operator, "/console/requests", two); rec.Code != http.StatusForbidden {
		t.Fatalf("operator bulk: %d", rec.Code)
	}
	if rec := h.post(admin, "/console/requests", two); rec.Code != http.StatusSeeOther {
		t.Fatalf("admin bulk: %d %s", rec.Code, rec.Body.String())
	}
	if rec := h.post(operator, "/console/requests/1/decide", url.Values{"decision": {"approve"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("operator approving: %d", rec.Code)
	}
	yesterday := url.Values{"day": {time.Now().UTC().AddDate(0, 0, -1).Format("2006-01-02")}}
	if rec := h.post(viewer, "/console/reconciliation", yesterday); rec.Code != http.StatusForbidden {
		t.Fatalf("viewer starting a run: %d", rec.Code)
	}
	if rec := h.post(operator, "/console/reconciliation", yesterday); rec.Code != http.StatusSeeOther {
		t.Fatalf("operator starting a run: %d %s", rec.Code, rec.Body.String())
	}
}

// A POST without this session's CSRF token, or from another site, is
// refused and changes nothing.
func TestCSRFRefusal(t *testing.T) {
	h := newHarness(t, Config{})
	ids := h.schedule(1, time.Now().Add(-time.Minute), 500)
	h.deadLetter(ids)
	ada, eve := h.as("ada", login.Admin), h.as("eve", login.Admin)
	path := "/console/payments/" + ids[0].String() + "/action"
	form := func(csrf string) url.Values {
		return url.Values{"action": {"REDRIVE"}, "reason": {"x"}, "csrf": {csrf}}
	}
	for name, rec := range map[string]*httptest.ResponseRecorder{
		"no token":          h.post(ada, path, form("")),
		"another's token":   h.post(ada, path, form(eve.csrf)),
		"forged token":      h.post(ada, path, form("AAAA")),
		"cross-site":        h.post(ada, path, form(ada.csrf), "Sec-Fetch-Site", "cross-site"),
		"foreign origin":    h.post(ada, path, form(ada.csrf), "Origin", "https://evil.example"),
		"logout, no token":  h.post(ada, "/console/logout", form("")),
		"decide, no token":  h.post(eve, "/console/requests/1/decide", url.Values{"decision": {"approve"}, "csrf": {""}}),
		"no session at all": h.post(signedIn{}, path, form(ada.csrf)),
	} {
		if rec.Code != http.StatusForbidden && rec.Code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 403", name, rec.Code)
		}
	}
	var n int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM console_requests`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d requests recorded (%v), want none", n, err)
	}
	if rec := h.post(ada, path, form(ada.csrf), "Origin", "http://example.com", "Sec-Fetch-Site", "same-origin"); rec.Code != http.StatusSeeOther {
		t.Fatalf("the session's own form: %d %s", rec.Code, rec.Body.String())
	}
}

// Four eyes: a bulk action waits; its requester cannot approve it (nor
// can the database be told otherwise); a second admin can, and then it
// runs with both names in every audit note.
func TestFourEyes(t *testing.T) {
	h := newHarness(t, Config{Policy: relaxed(10000)})
	ids := h.schedule(3, time.Now().Add(-time.Minute), 500)
	h.deadLetter(ids)
	ada, bea := h.as("ada", login.Admin), h.as("bea", login.Admin)
	preview := h.post(ada, "/console/dead-letters/preview", url.Values{"action": {"REDRIVE"}, "reason": {"psp back"}, "scope": {"all"}})
	if preview.Code != http.StatusOK || !strings.Contains(preview.Body.String(), "<strong>3</strong> payments") ||
		!strings.Contains(preview.Body.String(), "second operator") {
		t.Fatalf("preview: %d %s", preview.Code, preview.Body.String())
	}
	if len(h.acts.Calls()) != 0 {
		t.Fatal("the preview acted")
	}
	rid := requestID(t, h.post(ada, "/console/requests", url.Values{"action": {"REDRIVE"}, "reason": {"psp back"}, "scope": {"all"}, "count": {"3"}}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.runRequests(ctx)
	if r := h.requestState(rid); r.State != "AWAITING_APPROVAL" || len(r.IDs) != 3 {
		t.Fatalf("request %+v", r)
	}
	if rec := h.post(ada, fmt.Sprintf("/console/requests/%d/decide", rid), url.Values{"decision": {"approve"}}); rec.Code != http.StatusConflict {
		t.Fatalf("self-approval: %d", rec.Code)
	}
	if _, err := h.db.Exec(ctx, `UPDATE console_requests SET decided_by = requested_by, state = 'APPROVED' WHERE id = $1`, rid); err == nil {
		t.Fatal("the database let the requester approve")
	}
	time.Sleep(1500 * time.Millisecond) // a runner polls every second: nothing runs unapproved
	if len(h.acts.Calls()) != 0 {
		t.Fatalf("ran before approval: %v", h.acts.Calls())
	}
	if rec := h.post(bea, fmt.Sprintf("/console/requests/%d/decide", rid), url.Values{"decision": {"approve"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("second admin approving: %d %s", rec.Code, rec.Body.String())
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.requestState(rid).State != "DONE" {
		if time.Now().After(deadline) {
			t.Fatalf("request not done: %+v", h.requestState(rid))
		}
		time.Sleep(50 * time.Millisecond)
	}
	calls := h.acts.Calls()
	if len(calls) != 3 {
		t.Fatalf("calls %v", calls)
	}
	for _, c := range calls {
		if !strings.HasPrefix(c, "REDRIVE console:ada ") || !strings.Contains(c, "requested by ada, approved by bea") {
			t.Fatalf("call %q: want ada's action with both names", c)
		}
	}
	if r := h.requestState(rid); r.DecidedBy != "dev:bea" || r.DecidedName != "bea" || r.Done != 3 {
		t.Fatalf("request %+v", r)
	}
}

// One payment above the approval amount waits for a second operator;
// one below runs at once; a refusal is shown with its reason.
func TestApprovalAmountAndRefusals(t *testing.T) {
	h := newHarness(t, Config{Policy: relaxed(10000)})
	small := h.schedule(1, time.Now().Add(-time.Minute), 500)
	big := h.schedule(1, time.Now().Add(-time.Minute), 50000)
	h.deadLetter(append(small, big...))
	h.acts.refuse[small[0]] = true
	otto := h.as("otto", login.Operator)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.runRequests(ctx)
	act := url.Values{"action": {"RESOLVE"}, "reason": {"customer paid by wire"}}
	bigID := requestID(t, h.post(otto, "/console/payments/"+big[0].String()+"/action", act))
	smallID := requestID(t, h.post(otto, "/console/payments/"+small[0].String()+"/action", act))
	if r := h.requestState(bigID); r.State != "AWAITING_APPROVAL" {
		t.Fatalf("big one: %s", r.State)
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.requestState(smallID).State != "DONE" {
		if time.Now().After(deadline) {
			t.Fatal("small one not run")
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := h.requestState(smallID)
	if r.Failed != 1 || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "ch_1") {
		t.Fatalf("refusal not shown: %+v", r)
	}
	page := h.get(otto, fmt.Sprintf("/console/requests/%d", smallID))
	if !strings.Contains(page.Body.String(), "ch_1") {
		t.Fatal("the request page does not show the refusal")
	}
}

// Bad input anywhere gets a clear 4xx, never a 500, and no unbounded
// search runs.
func TestBadInputIsAClientError(t *testing.T) {
	h := newHarness(t, Config{})
	v := h.as("vera", login.Admin)
	long := strings.Repeat("x", 300)
	for _, p := range []string{
		"/console/payments/not-a-uuid",
		"/console/payments/" + uuid.NewString(),
		"/console/payments?id=0192",
		"/console/payments?payer=alice&from=yesterday",
		"/console/payments?from=1900-01-01",
		"/console/payments?from=2026-12-02T00:00&to=2026-12-01T00:00",
		"/console/payments?from=2000-01-01&to=2199-01-01",
		"/console/payments?status=PAID",
		"/console/payments?key=abc",
		"/console/payments?payer=" + long,
		"/console/payments?payer=alice&after=garbage",
		"/console/payments?payer=%ff%fe",
		"/console/payments?currency=XYZ",
		"/console/payments?min=100",
		"/console/payments?currency=USD&min=-5",
		"/console/payments?currency=USD&min=500&max=100",
		"/console/payments?error=OOPS",
		"/console/payments?tenant=" + long,
		"/console/dead-letters?reason=WHATEVER",
		"/console/dead-letters?after=x_y",
		"/console/requests/abc",
		"/console/requests/-1",
		"/console/requests/999999",
		"/console/nope",
	} {
		rec := h.get(v, p)
		if rec.Code < 400 || rec.Code >= 500 || !strings.Contains(rec.Body.String(), `id="error"`) {
			t.Errorf("GET %s: %d, want a 4xx page with a message", p, rec.Code)
		}
	}
	for _, c := range []struct {
		path string
		form url.Values
	}{
		{"/console/payments/" + uuid.NewString() + "/action", url.Values{"action": {"REDRIVE"}, "reason": {"x"}}},
		{"/console/payments/zzz/action", url.Values{"action": {"REDRIVE"}, "reason": {"x"}}},
		{"/console/payments/" + uuid.NewString() + "/action", url.Values{"action": {"DROP"}, "reason": {"x"}}},
		{"/console/payments/" + uuid.NewString() + "/action", url.Values{"action": {"REDRIVE"}}},
		{"/console/payments/" + uuid.NewString() + "/action", url.Values{"action": {"REDRIVE"}, "reason": {"a\nb"}}},
		{"/console/dead-letters/preview", url.Values{"action": {"REDRIVE"}, "reason": {"x"}, "scope": {"selected"}, "id": {"nope"}}},
		{"/console/dead-letters/preview", url.Values{"action": {"REDRIVE"}, "reason": {"x"}, "scope": {"everything"}}},
		{"/console/dead-letters/preview", url.Values{"action": {"REDRIVE"}, "reason": {"x"}, "scope": {"all"}, "filter": {"NOPE"}}},
		{"/console/requests", url.Values{"action": {"REDRIVE"}, "reason": {"x"}, "scope": {"all"}, "count": {"x"}}},
		{"/console/requests/1/decide", url.Values{"decision": {"maybe"}}},
		{"/console/requests/abc/decide", url.Values{"decision": {"approve"}}},
		{"/console/reconciliation", url.Values{"day": {"2999-01-01"}}},
		{"/console/reconciliation", url.Values{"day": {"tomorrow"}}},
	} {
		rec := h.post(v, c.path, c.form)
		if rec.Code < 400 || rec.Code >= 500 {
			t.Errorf("POST %s %v: %d, want 4xx", c.path, c.form, rec.Code)
		}
	}
}

// Sessions: the dev login sets an HttpOnly, Secure, SameSite=Strict
// cookie; the page carries a CSP with a nonce; outside development the
// local login does not exist.
func TestDevLoginAndHeaders(t *testing.T) {
	h := newHarness(t, Config{})
	page := h.get(signedIn{}, "/console/login?next=/console/gateway")
	pre := page.Result().Cookies()[0]
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page.Body.String())
	if m == nil {
		t.Fatal("no CSRF field on the login page")
	}
	req := httptest.NewRequest(http.MethodPost, "/console/login/dev", strings.NewReader(url.Values{"csrf": {m[1]}, "name": {"alice"},
		"role": {"operator"}, "next": {"/console/gateway"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(pre)
	rec := httptest.NewRecorder()
	h.c.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/console/gateway" {
		t.Fatalf("login: %d %s", rec.Code, rec.Body.String())
	}
	ck := rec.Result().Cookies()[0]
	if !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/console/" {
		t.Fatalf("session cookie %+v", ck)
	}
	got := h.get(signedIn{ck: ck}, "/console/")
	cspHdr := got.Header().Get("Content-Security-Policy")
	if got.Code != http.StatusOK || !strings.Contains(cspHdr, "script-src 'nonce-") || strings.Contains(cspHdr, "unsafe-inline") {
		t.Fatalf("overview: %d CSP %q", got.Code, cspHdr)
	}
	if !strings.Contains(got.Body.String(), "alice (operator)") {
		t.Fatal("the page does not name the operator")
	}
	// An open redirect is refused.
	if h.c.login.SafeNext("https://evil.example/") != "/console/" || h.c.login.SafeNext("//evil.example") != "/console/" {
		t.Fatal("next may leave the console")
	}
	// A tampered cookie is no session.
	bad := *ck
	bad.Value = strings.Replace(bad.Value, ".", "x.", 1)
	if rec := h.get(signedIn{ck: &bad}, "/console/"); rec.Code != http.StatusSeeOther {
		t.Fatalf("tampered cookie: %d", rec.Code)
	}
	prod, err := New(context.Background(), Config{SessionKey: []byte(strings.Repeat("k", 32)), Dev: true}, h.db, h.acts, quiet)
	if err != nil {
		t.Fatal(err)
	}
	prod.cfg.Dev = false
	req = httptest.NewRequest(http.MethodPost, "/console/login/dev", strings.NewReader("name=x&role=admin"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec = httptest.NewRecorder()
	prod.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound {
		t.Fatalf("dev login in production: %d", rec.Code)
	}
	if _, err := New(context.Background(), Config{SessionKey: []byte(strings.Repeat("k", 32))}, h.db, h.acts, quiet); err == nil {
		t.Fatal("a production console without OIDC started")
	}
}

// relaxed is a policy that lets one operator take any action alone on
// one payment below amount (development's): the tests of the console's
// thresholds and runs.
func relaxed(amount int64) approval.Policy {
	p := approval.Strict()
	p.Amount = amount
	for a := range approval.Actions {
		p.Single[a] = true
	}
	return p
}

// runRequests applies requests until ctx ends, as admin-api's runner
// does.
func (h *harness) runRequests(ctx context.Context) {
	h.c.requests.Run(ctx, "test", h.c.actions)
}
