package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/store"
)

// TestRequestsAreCheckedInTheDatabase: whatever the console's code does,
// the database refuses a request that moves money past four eyes: one
// approved, running or done without a decider when it needed approval, an
// APPROVED one without a decider at all, and one on more than one payment
// that claims it needs no approval.
func TestRequestsAreCheckedInTheDatabase(t *testing.T) {
	h := newHarness(t, Config{})
	ids := []uuid.UUID{uuid.New(), uuid.New()}
	for _, c := range []struct {
		name   string
		ids    []uuid.UUID
		need   bool
		state  string
		decide string
	}{
		{"approved without a decider", ids[:1], true, "APPROVED", ""},
		{"running without a decider", ids[:1], true, "RUNNING", ""},
		{"done without a decider", ids[:1], true, "DONE", ""},
		{"rejected without a decider", ids[:1], true, "REJECTED", ""},
		{"APPROVED, no approval needed, no decider", ids[:1], false, "APPROVED", ""},
		{"two payments without approval", ids, false, "RUNNING", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.db.Exec(context.Background(), `INSERT INTO console_requests (action, ids, reason, requested_by, needs_approval, state, decided_by)
				VALUES ('CANCEL', $1, 'x', 'ada', $2, $3, NULLIF($4, ''))`, c.ids, c.need, c.state, c.decide)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "23514" {
				t.Fatalf("got %v, want a CHECK violation (23514)", err)
			}
		})
	}
}

// loginAs logs user in through the provider and returns the session.
func loginAs(t *testing.T, h *harness, m *mockoidc.MockOIDC, user *mockoidc.MockUser) signedIn {
	t.Helper()
	rec := loginVia(t, h, m, user)
	for _, ck := range rec.Result().Cookies() {
		if ck.Name == login.SessionCookie {
			sid, ok := h.c.login.SessionID(ck.Value)
			if !ok {
				t.Fatal("session does not open")
			}
			return signedIn{ck: ck, csrf: h.c.login.CSRF(sid)}
		}
	}
	t.Fatalf("no session after login: %d %s", rec.Code, rec.Header().Get("Location"))
	return signedIn{}
}

// TestApproverIsAnIdentityNotAName: four eyes compare who logged in (the
// provider's issuer and subject), never the name shown. Two people the
// provider calls "ada" are two operators: one may approve the other's
// request. One person who renamed themselves is still one: they may not
// approve their own request.
func TestApproverIsAnIdentityNotAName(t *testing.T) {
	h, m := oidcConsole(t)
	ids := h.schedule(4, time.Now().Add(-time.Minute), 500)
	h.deadLetter(ids)
	ada1 := &mockoidc.MockUser{Subject: "u-ada-1", PreferredUsername: "ada", Email: "ada1@example.com", Groups: []string{"admin"}}
	ada2 := &mockoidc.MockUser{Subject: "u-ada-2", PreferredUsername: "ada", Email: "ada2@example.com", Groups: []string{"admin"}}
	first := loginAs(t, h, m, ada1)
	bulk := func(l signedIn, a, b uuid.UUID) int64 {
		return requestID(t, h.post(l, "/console/requests", url.Values{"action": {"REDRIVE"}, "reason": {"psp back"}, "scope": {"selected"},
			"id": {a.String(), b.String()}, "count": {"2"}}))
	}
	r1 := bulk(first, ids[0], ids[1])
	second := loginAs(t, h, m, ada2)
	if rec := h.post(second, fmt.Sprintf("/console/requests/%d/decide", r1), url.Values{"decision": {"approve"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("another person also called ada approving: %d %s", rec.Code, rec.Body.String())
	}
	r2 := bulk(first, ids[2], ids[3])
	renamed := *ada1
	renamed.PreferredUsername, renamed.Email = "ada-renamed", "ada.renamed@example.com"
	again := loginAs(t, h, m, &renamed)
	if rec := h.post(again, fmt.Sprintf("/console/requests/%d/decide", r2), url.Values{"decision": {"approve"}}); rec.Code != http.StatusConflict {
		t.Fatalf("the requester, renamed, approving their own request: %d", rec.Code)
	}
	if r := h.requestState(r2); r.State != "AWAITING_APPROVAL" {
		t.Fatalf("request %+v: approved by its requester", r)
	}
}

// scheduleIn is h.schedule in currency.
func (h *harness) scheduleIn(currency string, n int, amount int64) []uuid.UUID {
	h.t.Helper()
	var items []store.NewPayment
	var ids []uuid.UUID
	for range n {
		id, _ := uuid.NewV7()
		items = append(items, store.NewPayment{ID: id, Payer: "alice", Payee: "bob", Amount: amount, Currency: currency,
			DueAt: time.Now().Add(-time.Minute), CreatedAt: time.Now(), IdempotencyKey: "k-" + id.String(), Tenant: "alice"})
		ids = append(ids, id)
	}
	if _, err := store.NewStore(h.db).Create(context.Background(), items); err != nil {
		h.t.Fatal(err)
	}
	h.deadLetter(ids)
	return ids
}

// TestSplitActionsGoToApproval: single-payment actions below the approval
// amount run at once, but not without end: an operator's running total
// over the window, in each currency, and their count, send the next one
// to a second operator past the threshold. One currency's total is never
// added to another's.
func TestSplitActionsGoToApproval(t *testing.T) {
	h := newHarness(t, Config{Policy: relaxed(10000)})
	otto := h.as("otto", login.Operator)
	act := func(l signedIn, id uuid.UUID) string {
		t.Helper()
		return h.requestState(requestID(t, h.post(l, "/console/payments/"+id.String()+"/action",
			url.Values{"action": {"CANCEL"}, "reason": {"customer asked"}}))).State
	}
	eur, jpy := h.scheduleIn("EUR", 3, 4000), h.scheduleIn("JPY", 2, 4000)
	for i, c := range []struct {
		id    uuid.UUID
		await bool
	}{{eur[0], false}, {jpy[0], false}, {eur[1], false}, {jpy[1], false}, {eur[2], true}} {
		if st := act(otto, c.id); (st == "AWAITING_APPROVAL") != c.await {
			t.Fatalf("action %d: %s, want awaiting approval %v (EUR 4000 each against 10000, JPY apart)", i+1, st, c.await)
		}
	}
	// The count: ten small ones in the window run, the eleventh waits.
	olga := h.as("olga", login.Operator)
	small := h.scheduleIn("EUR", 11, 10)
	for i, id := range small {
		if st := act(olga, id); (st == "AWAITING_APPROVAL") != (i == 10) {
			t.Fatalf("small action %d: %s", i+1, st)
		}
	}
}

// TestSplitActionsRace: an operator's single actions sent at once are
// counted one after another: no more run without approval than the count
// allows.
func TestSplitActionsRace(t *testing.T) {
	h := newHarness(t, Config{Policy: relaxed(1 << 40)})
	otto := h.as("otto", login.Operator)
	ids := h.scheduleIn("EUR", 20, 10)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rec := h.post(otto, "/console/payments/"+id.String()+"/action", url.Values{"action": {"CANCEL"}, "reason": {"x"}}); rec.Code != http.StatusSeeOther {
				t.Errorf("action: %d %s", rec.Code, rec.Body.String())
			}
		}()
	}
	wg.Wait()
	var unapproved int
	if err := h.db.QueryRow(context.Background(), `SELECT count(*) FROM console_requests WHERE NOT needs_approval`).Scan(&unapproved); err != nil {
		t.Fatal(err)
	}
	if unapproved != 10 {
		t.Fatalf("%d of 20 concurrent single actions run without approval, want 10 (the count)", unapproved)
	}
}

// TestLogoutEndsTheSessionServerSide: after logout the session's cookie,
// replayed, opens nothing, here or on any replica.
func TestLogoutEndsTheSessionServerSide(t *testing.T) {
	h := newHarness(t, Config{})
	otto := h.as("otto", login.Operator)
	if rec := h.get(otto, "/console/"); rec.Code != http.StatusOK {
		t.Fatalf("before logout: %d", rec.Code)
	}
	if rec := h.post(otto, "/console/logout", url.Values{}); rec.Code != http.StatusSeeOther {
		t.Fatalf("logout: %d", rec.Code)
	}
	// Another replica: the same key, the same database.
	other, err := New(context.Background(), h.c.cfg, h.db, h.acts, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*Console{"this replica": h.c, "another replica": other} {
		req := httptest.NewRequest(http.MethodGet, "/console/", nil)
		req.AddCookie(otto.ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code != http.StatusSeeOther || !strings.HasPrefix(rec.Header().Get("Location"), "/console/login") {
			t.Fatalf("%s: the logged-out cookie still opens a page: %d", name, rec.Code)
		}
	}
}

// TestAdminRevokesSessions: an admin ends another operator's sessions
// from the console; their cookies open nothing after.
func TestAdminRevokesSessions(t *testing.T) {
	h := newHarness(t, Config{})
	otto, ada := h.as("otto", login.Operator), h.as("ada", login.Admin)
	page := h.get(ada, "/console/sessions")
	if page.Code != http.StatusOK || !strings.Contains(page.Body.String(), "otto") {
		t.Fatalf("sessions page: %d", page.Code)
	}
	if rec := h.post(otto, "/console/sessions/revoke", url.Values{"operator": {"dev:ada"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("an operator revoking an admin: %d", rec.Code)
	}
	if rec := h.post(ada, "/console/sessions/revoke", url.Values{"operator": {"dev:otto"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body.String())
	}
	if rec := h.get(otto, "/console/"); rec.Code != http.StatusSeeOther {
		t.Fatalf("a revoked session still opens a page: %d", rec.Code)
	}
	if rec := h.get(ada, "/console/"); rec.Code != http.StatusOK {
		t.Fatalf("the admin's own session: %d", rec.Code)
	}
}

// TestRoleChangeTakesEffectWithinAMinute: the provider takes the admin
// role from an operator; within a minute the console knows: the next page
// shows the new role and an admin's action is refused.
func TestRoleChangeTakesEffectWithinAMinute(t *testing.T) {
	h, m := oidcConsole(t)
	ids := h.schedule(2, time.Now().Add(-time.Minute), 500)
	h.deadLetter(ids)
	carol := &mockoidc.MockUser{Subject: "u-carol", PreferredUsername: "carol", Groups: []string{"admin"}}
	l := loginAs(t, h, m, carol)
	if page := h.get(l, "/console/"); !strings.Contains(page.Body.String(), "carol (admin)") {
		t.Fatalf("before: %d", page.Code)
	}
	carol.Groups = []string{"viewer"}
	start := time.Now()
	h.c.now = func() time.Time { return time.Now().Add(61 * time.Second) }
	if page := h.get(l, "/console/"); !strings.Contains(page.Body.String(), "carol (viewer)") {
		t.Fatalf("a minute after the provider changed the role the page says: %d %s", page.Code, page.Body.String())
	}
	_ = start
	if rec := h.post(l, "/console/requests", url.Values{"action": {"REDRIVE"}, "reason": {"x"}, "scope": {"all"}, "count": {"2"}}); rec.Code != http.StatusForbidden {
		t.Fatalf("an admin action after the role was taken: %d", rec.Code)
	}
}
