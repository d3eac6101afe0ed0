package console

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/paysched/paysched/pkg/console/login"
)

// The login's pages: who is there is package login's to say (sessions,
// cookies, CSRF, OIDC); these draw its forms and answers.

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	v := &view{Nonce: nonce(), Title: "Log in", Path: r.URL.Path}
	w.Header().Set("Content-Security-Policy", csp(v.Nonce))
	v.CSRF = c.login.LoginForm(w)
	next := c.login.SafeNext(r.URL.Query().Get("next"))
	v.Data = map[string]any{"Dev": c.cfg.Dev, "OIDC": c.login.OIDC(), "Next": next,
		"Roles": []string{"viewer", "operator", "admin"}}
	if msg := r.URL.Query().Get("error"); msg != "" {
		v.Error = loginErrors[msg]
	}
	c.render(w, http.StatusOK, "login.html", v)
}

var loginErrors = map[string]string{
	login.RefusedNoRole:  "Your identity provider gave you no console role.",
	login.RefusedExpired: "The login took too long or was started elsewhere: try again.",
	login.RefusedDenied:  "The identity provider refused the login.",
}

// devLogin is development mode's local login: any name, any role.
func (c *Console) devLogin(w http.ResponseWriter, r *http.Request) {
	v := &view{Nonce: nonce(), Path: r.URL.Path}
	w.Header().Set("Content-Security-Policy", csp(v.Nonce))
	if !c.cfg.Dev {
		c.fail(w, r, v, http.StatusNotFound, "The local login exists only in development mode.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, v, http.StatusBadRequest, "The login form could not be read.")
		return
	}
	if !c.login.CheckLoginForm(r) {
		c.fail(w, r, v, http.StatusForbidden, "This login form is not valid any more: reload the login page.")
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("name"))
	if !login.ValidName(name) {
		c.fail(w, r, v, http.StatusBadRequest, "A name is 1 to 64 letters, digits, '.', '_', '-' or '@'.")
		return
	}
	role := login.ParseRole(r.PostForm.Get("role"))
	if role == login.NoRole {
		c.fail(w, r, v, http.StatusBadRequest, "Choose viewer, operator or admin.")
		return
	}
	if err := c.login.Start(r.Context(), w, login.DevIdentity(name), role, "dev", ""); err != nil {
		c.fail(w, r, v, http.StatusInternalServerError, "Could not start a session.")
		return
	}
	http.Redirect(w, r, c.login.SafeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

// logout ends the session on the server (a copy of its cookie opens
// nothing after) and drops the cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, v *view) {
	if err := c.login.Logout(r.Context(), w, v.Session); err != nil {
		c.dbFail(w, r, v, "log out", err)
		return
	}
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	if !c.login.OIDC() {
		c.fail(w, r, nil, http.StatusNotFound, "No identity provider is configured.")
		return
	}
	to, err := c.login.BeginOIDC(w, r.URL.Query().Get("next"))
	if err != nil {
		c.log.Warn("console: OIDC login", "err", err)
		c.fail(w, r, nil, http.StatusInternalServerError, "Could not start the login.")
		return
	}
	http.Redirect(w, r, to, http.StatusFound)
}

func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	if !c.login.OIDC() {
		c.fail(w, r, nil, http.StatusNotFound, "No identity provider is configured.")
		return
	}
	next, refusal, err := c.login.FinishOIDC(w, r)
	switch {
	case err != nil:
		c.log.Warn("console: OIDC login", "err", err)
		c.fail(w, r, nil, http.StatusInternalServerError, "Could not start a session.")
		return
	case refusal != "":
		http.Redirect(w, r, Prefix+"/login?error="+refusal, http.StatusSeeOther)
		return
	}
	// A page of our own moves on: a redirect here would still count as the
	// provider's cross-site navigation, and the Strict session cookie
	// would not be sent with it.
	v := &view{Nonce: nonce(), Title: "Logged in", Data: next}
	w.Header().Set("Content-Security-Policy", csp(v.Nonce))
	c.render(w, http.StatusOK, "continue.html", v)
}

// sessionsPage lists the sessions that are open (admin).
func (c *Console) sessionsPage(w http.ResponseWriter, r *http.Request, v *view) {
	ctx := r.Context()
	list, err := c.login.ActiveSessions(ctx, v.Session.ID)
	if err != nil {
		c.dbFail(w, r, v, "list sessions", err)
		return
	}
	v.Title, v.Data = "Sessions", map[string]any{"Sessions": list}
	c.render(w, http.StatusOK, "sessions.html", v)
}

// revokeOperator ends every open session of one operator (admin): their
// next page asks them to log in again.
func (c *Console) revokeOperator(w http.ResponseWriter, r *http.Request, v *view) {
	op := r.PostForm.Get("operator")
	if op == "" || len(op) > 600 {
		c.fail(w, r, v, http.StatusBadRequest, "Name the operator whose sessions to end.")
		return
	}
	ctx := r.Context()
	n, err := c.login.RevokeOperator(ctx, op, v.Session.Operator)
	if err != nil {
		c.dbFail(w, r, v, "revoke sessions", err)
		return
	}
	c.log.Info("console: sessions revoked", "operator", op, "sessions", n, "by", v.Session.Name, "identity", v.Session.Operator)
	http.Redirect(w, r, Prefix+"/sessions", http.StatusSeeOther)
}

// nonce is a page's CSP nonce.
func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
