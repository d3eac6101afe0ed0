package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Role is what an operator may do; each includes the ones before it.
type Role int

// The console's roles.
const (
	NoRole Role = iota
	// Viewer reads every page.
	Viewer
	// Operator also acts on one payment and starts reconciliation runs.
	Operator
	// Admin also requests bulk actions and approves others' requests.
	Admin
)

// String names the role as the login form and the claims spell it.
func (r Role) String() string {
	switch r {
	case Viewer:
		return "viewer"
	case Operator:
		return "operator"
	case Admin:
		return "admin"
	}
	return "none"
}

// ParseRole reads a role name ("viewer", "operator", "admin").
func ParseRole(s string) Role {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "viewer":
		return Viewer
	case "operator":
		return Operator
	case "admin":
		return Admin
	}
	return NoRole
}

// Session is a logged-in operator. The signed cookie carries its id and
// expiry only; the rest is the server's (console_sessions), read on every
// page: logout and an admin's revoke end it everywhere at once, and its
// role is the one last read from the identity provider.
type Session struct {
	ID string `json:"sid"`
	// Operator is who logged in, as four eyes compare it: the identity
	// provider's issuer and subject ("<iss>#<sub>"), or "dev:<name>" for
	// the local login. Never a display name.
	Operator string `json:"-"`
	// Name is shown and audited, never compared.
	Name    string    `json:"-"`
	Role    Role      `json:"-"`
	Via     string    `json:"-"` // "dev" or "oidc"
	Expires time.Time `json:"exp"`
}

// who is the session's identity.
func (s *Session) who() identity { return identity{Operator: s.Operator, Name: s.Name} }

// IsAdmin reports whether the session holds the admin role (templates).
func (s *Session) IsAdmin() bool { return s.Role >= Admin }

// identity is who logs in: the compared identity and the shown name.
type identity struct{ Operator, Name string }

// devIdentity is the local login's identity: development only, where any
// name is anyone.
func devIdentity(name string) identity { return identity{Operator: "dev:" + name, Name: name} }

// oidcIdentity is a provider's user: its issuer and subject, which it
// never reassigns, and the name it shows.
func oidcIdentity(iss, sub, name string) identity {
	return identity{Operator: iss + "#" + sub, Name: name}
}

const (
	sessionCookie = "paysched_console"
	// preCookie ties the login form to this browser (login CSRF).
	preCookie = "paysched_console_pre"
	// flowCookie holds an OIDC login's state, nonce and PKCE verifier.
	flowCookie = "paysched_console_oidc"
)

func (c *Console) sign(purpose string, payload []byte) string {
	m := hmac.New(sha256.New, c.cfg.SessionKey)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write(payload)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// seal encodes v and signs it for purpose.
func (c *Console) seal(purpose string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b) + "." + c.sign(purpose, b), nil
}

// open checks a sealed value's signature and decodes it into v.
func (c *Console) open(purpose, s string, v any) bool {
	body, sig, ok := strings.Cut(s, ".")
	if !ok {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || !hmac.Equal([]byte(sig), []byte(c.sign(purpose, b))) {
		return false
	}
	return json.Unmarshal(b, v) == nil
}

// session returns the request's valid, unexpired session as the server
// holds it now: not revoked, not logged out, with its current role.
func (c *Console) session(r *http.Request) (*Session, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, false
	}
	var s Session
	if !c.open("session", ck.Value, &s) || c.now().After(s.Expires) || s.ID == "" {
		return nil, false
	}
	got, err := c.loadSession(r.Context(), s.ID)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			c.log.Warn("console: read session", "err", err)
		}
		return nil, false
	}
	if got.Role == NoRole || c.now().After(got.Expires) {
		return nil, false
	}
	return got, true
}

// startSession records a session for who and sets its cookie: HttpOnly
// (no script reads it), Secure (browsers treat 127.0.0.1 and localhost as
// secure too), SameSite=Strict (no other site's page sends it),
// path-scoped. refresh is the provider's refresh token ("": none).
func (c *Console) startSession(ctx context.Context, w http.ResponseWriter, who identity, role Role, via, refresh string) error {
	s := Session{ID: randomToken(), Operator: who.Operator, Name: who.Name, Role: role, Via: via, Expires: c.now().Add(c.cfg.SessionTTL)}
	if err := c.recordSession(ctx, &s, refresh); err != nil {
		return err
	}
	v, err := c.seal("session", s)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: v, Path: Prefix + "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, Expires: s.Expires})
	c.log.Info("console: login", "operator", who.Name, "identity", who.Operator, "role", role.String(), "via", via)
	return nil
}

func (c *Console) csrfToken(sid string) string { return c.sign("csrf", []byte(sid)) }

// checkPost refuses a POST that is not this session's own form: a request
// another site made (Sec-Fetch-Site, Origin) or one without the session's
// CSRF token.
func (c *Console) checkPost(r *http.Request, s *Session) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return errors.New("cross-site request (Sec-Fetch-Site: " + site + ")")
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errors.New("foreign origin " + o)
		}
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		return errors.New("unreadable form")
	}
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(c.csrfToken(s.ID))) {
		return errors.New("missing or wrong CSRF token")
	}
	return nil
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	v := &view{Nonce: nonce(), Title: "Log in", Path: r.URL.Path}
	w.Header().Set("Content-Security-Policy", csp(v.Nonce))
	pre := randomToken()
	http.SetCookie(w, &http.Cookie{Name: preCookie, Value: pre, Path: Prefix + "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, MaxAge: 600})
	v.CSRF = c.csrfToken("pre:" + pre)
	next := safeNext(r.URL.Query().Get("next"))
	v.Data = map[string]any{"Dev": c.cfg.Dev, "OIDC": c.oidc != nil, "Next": next,
		"Roles": []string{"viewer", "operator", "admin"}}
	if msg := r.URL.Query().Get("error"); msg != "" {
		v.Error = loginErrors[msg]
	}
	c.render(w, http.StatusOK, "login.html", v)
}

var loginErrors = map[string]string{
	"norole":  "Your identity provider gave you no console role.",
	"expired": "The login took too long or was started elsewhere: try again.",
	"denied":  "The identity provider refused the login.",
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
	pre, err := r.Cookie(preCookie)
	if err != nil || !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(c.csrfToken("pre:"+pre.Value))) {
		c.fail(w, r, v, http.StatusForbidden, "This login form is not valid any more: reload the login page.")
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("name"))
	if !validName(name) {
		c.fail(w, r, v, http.StatusBadRequest, "A name is 1 to 64 letters, digits, '.', '_', '-' or '@'.")
		return
	}
	role := ParseRole(r.PostForm.Get("role"))
	if role == NoRole {
		c.fail(w, r, v, http.StatusBadRequest, "Choose viewer, operator or admin.")
		return
	}
	if err := c.startSession(r.Context(), w, devIdentity(name), role, "dev", ""); err != nil {
		c.fail(w, r, v, http.StatusInternalServerError, "Could not start a session.")
		return
	}
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

// logout ends the session on the server (a copy of its cookie opens
// nothing after) and drops the cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, v *view) {
	if err := c.revokeSession(r.Context(), v.Session.ID, v.Session.Operator); err != nil {
		c.dbFail(w, r, v, "log out", err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: Prefix + "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	c.log.Info("console: logout", "operator", v.Session.Name, "identity", v.Session.Operator)
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// validName: an operator's name as the audit log shows it.
func validName(s string) bool {
	if s == "" || utf8.RuneCountInString(s) > 64 {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-@", r)
		if !ok {
			return false
		}
	}
	return true
}

// safeNext keeps a post-login redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return Prefix + "/"
	}
	return next
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func nonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
