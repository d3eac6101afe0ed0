package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/paysched/paysched/pkg/console/login"
)

// oidcConsole is a production console (no local login) whose identity
// provider is an in-test OIDC server.
func oidcConsole(t *testing.T) (*harness, *mockoidc.MockOIDC) {
	t.Helper()
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	h := newHarness(t, Config{})
	cfg := m.Config()
	c, err := New(context.Background(), Config{SessionKey: []byte(strings.Repeat("s", 32)), OIDC: &login.OIDCConfig{
		Issuer: cfg.Issuer, ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret,
		RedirectURL: "http://127.0.0.1:8081/console/login/callback", RolesClaim: "groups", Scopes: []string{"groups"}}}, h.db, h.acts, quiet)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return h, m
}

// loginVia runs the authorization code flow with PKCE against the
// provider for user; it returns the callback's answer.
func loginVia(t *testing.T, h *harness, m *mockoidc.MockOIDC, user *mockoidc.MockUser) *httptest.ResponseRecorder {
	t.Helper()
	m.QueueUser(user)
	start := httptest.NewRecorder()
	h.c.ServeHTTP(start, httptest.NewRequest(http.MethodGet, "/console/login/oidc?next=/console/gateway", nil))
	auth, err := url.Parse(start.Header().Get("Location"))
	if start.Code != http.StatusFound || err != nil || auth.Query().Get("code_challenge_method") != "S256" || auth.Query().Get("code_challenge") == "" {
		t.Fatalf("start: %d %q (want a PKCE S256 authorization request)", start.Code, start.Header().Get("Location"))
	}
	flow := start.Result().Cookies()[0]
	if flow.SameSite != http.SameSiteLaxMode || !flow.HttpOnly || !flow.Secure {
		t.Fatalf("flow cookie %+v", flow)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(auth.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || back.Query().Get("code") == "" {
		t.Fatalf("provider answered %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	req := httptest.NewRequest(http.MethodGet, "/console/login/callback?"+back.RawQuery, nil)
	req.AddCookie(flow)
	rec := httptest.NewRecorder()
	h.c.ServeHTTP(rec, req)
	return rec
}

// The production login: OIDC authorization code with PKCE; the role comes
// from the configured claim; no role, no session; the local login is
// absent.
func TestOIDCLogin(t *testing.T) {
	h, m := oidcConsole(t)
	rec := loginVia(t, h, m, &mockoidc.MockUser{Subject: "u-1", PreferredUsername: "carol", Email: "carol@example.com", Groups: []string{"staff", "operator"}})
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `href="/console/gateway"`) {
		t.Fatalf("callback: %d %s", rec.Code, rec.Body.String())
	}
	var sess *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == login.SessionCookie {
			sess = c
		}
	}
	if sess == nil || sess.SameSite != http.SameSiteStrictMode || !sess.HttpOnly || !sess.Secure {
		t.Fatalf("session cookie %+v", sess)
	}
	page := h.get(signedIn{ck: sess}, "/console/gateway")
	if page.Code != http.StatusOK || !strings.Contains(page.Body.String(), "carol (operator)") {
		t.Fatalf("gateway page as carol: %d", page.Code)
	}
	// A user the provider gives no console role gets no session.
	rec = loginVia(t, h, m, &mockoidc.MockUser{Subject: "u-2", PreferredUsername: "mallory", Groups: []string{"staff"}})
	if rec.Code != http.StatusSeeOther || !strings.Contains(rec.Header().Get("Location"), "error=norole") {
		t.Fatalf("no role: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	// A callback without its flow cookie (another browser, a replay) is refused.
	req := httptest.NewRequest(http.MethodGet, "/console/login/callback?code=x&state=y", nil)
	rec = httptest.NewRecorder()
	h.c.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || !strings.Contains(rec.Header().Get("Location"), "error=expired") {
		t.Fatalf("callback without flow: %d", rec.Code)
	}
	// Production has no local login.
	page = h.get(signedIn{}, "/console/login")
	if strings.Contains(page.Body.String(), "Development login") || !strings.Contains(page.Body.String(), `id="sso"`) {
		t.Fatal("the production login page offers a local login")
	}
}
