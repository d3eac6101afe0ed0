package login

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/console/login/sessiondb"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// The cookies.
const (
	// SessionCookie carries a session's id and expiry, signed.
	SessionCookie = "paysched_console"
	// preCookie ties the login form to this browser (login CSRF).
	preCookie = "paysched_console_pre"
	// flowCookie holds an OIDC login's state, nonce and PKCE verifier.
	flowCookie = "paysched_console_oidc"
)

// Config configures the sessions.
type Config struct {
	// Key signs the cookies and CSRF tokens and seals the providers'
	// refresh tokens (at least 32 bytes; every replica has the same).
	Key []byte
	// TTL is how long a login lasts.
	TTL time.Duration
	// OIDC, if set, is the production login.
	OIDC *OIDCConfig
	// Prefix is the console's path: the cookies' scope, and where a
	// login may send the browser on to.
	Prefix string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Log takes logins, logouts and refused sessions.
	Log *slog.Logger
}

// Session is a logged-in operator. The signed cookie carries its id and
// expiry only; the rest is the server's (console_sessions), read on every
// page: logout and an admin's revoke end it everywhere at once, and its
// role is the one last read from the identity provider.
type Session struct {
	ID string `json:"sid"`
	// Operator is who logged in, as four eyes compare it (Identity).
	Operator string `json:"-"`
	// Name is shown and audited, never compared.
	Name    string    `json:"-"`
	Role    Role      `json:"-"`
	Via     string    `json:"-"` // "dev" or "oidc"
	Expires time.Time `json:"exp"`
}

// Who is the session's identity.
func (s *Session) Who() Identity { return Identity{Operator: s.Operator, Name: s.Name} }

// IsAdmin reports whether the session holds the admin role (templates).
func (s *Session) IsAdmin() bool { return s.Role >= Admin }

// Sessions starts, finds and ends the operators' sessions.
type Sessions struct {
	cfg  Config
	q    *sessiondb.Queries
	oidc *oidcLogin
}

// New returns the sessions kept in db. ctx bounds the OIDC discovery.
func New(ctx context.Context, cfg Config, db pgdb.DB) (*Sessions, error) {
	if len(cfg.Key) < 32 {
		return nil, fmt.Errorf("login: the session key must be at least 32 bytes, got %d", len(cfg.Key))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	m := &Sessions{cfg: cfg, q: sessiondb.New(db)}
	if cfg.OIDC != nil {
		var err error
		if m.oidc, err = newOIDC(ctx, *cfg.OIDC); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// OIDC says an identity provider is configured.
func (m *Sessions) OIDC() bool { return m.oidc != nil }

func (m *Sessions) sign(purpose string, payload []byte) string {
	h := hmac.New(sha256.New, m.cfg.Key)
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write(payload)
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// seal encodes v and signs it for purpose.
func (m *Sessions) seal(purpose string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b) + "." + m.sign(purpose, b), nil
}

// open checks a sealed value's signature and decodes it into v.
func (m *Sessions) open(purpose, s string, v any) bool {
	body, sig, ok := strings.Cut(s, ".")
	if !ok {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || !hmac.Equal([]byte(sig), []byte(m.sign(purpose, b))) {
		return false
	}
	return json.Unmarshal(b, v) == nil
}

// SessionID is the session id a session cookie's value carries, if its
// signature holds (tests and tools that log in through the form).
func (m *Sessions) SessionID(cookie string) (string, bool) {
	var s Session
	ok := m.open("session", cookie, &s) && s.ID != ""
	return s.ID, ok
}

// Current returns the request's valid, unexpired session as the server
// holds it now: not revoked, not logged out, with its current role.
func (m *Sessions) Current(r *http.Request) (*Session, bool) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil, false
	}
	var s Session
	if !m.open("session", ck.Value, &s) || m.cfg.Now().After(s.Expires) || s.ID == "" {
		return nil, false
	}
	got, err := m.load(r.Context(), s.ID)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			m.cfg.Log.Warn("console: read session", "err", err)
		}
		return nil, false
	}
	if got.Role == NoRole || m.cfg.Now().After(got.Expires) {
		return nil, false
	}
	return got, true
}

// Start records a session for who and sets its cookie: HttpOnly (no
// script reads it), Secure (browsers treat 127.0.0.1 and localhost as
// secure too), SameSite=Strict (no other site's page sends it),
// path-scoped. refresh is the provider's refresh token ("": none).
func (m *Sessions) Start(ctx context.Context, w http.ResponseWriter, who Identity, role Role, via, refresh string) error {
	s := Session{ID: randomToken(), Operator: who.Operator, Name: who.Name, Role: role, Via: via, Expires: m.cfg.Now().Add(m.cfg.TTL)}
	if err := m.record(ctx, &s, refresh); err != nil {
		return err
	}
	v, err := m.seal("session", s)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: v, Path: m.cfg.Prefix + "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, Expires: s.Expires})
	m.cfg.Log.Info("console: login", "operator", who.Name, "identity", who.Operator, "role", role.String(), "via", via)
	return nil
}

// Logout ends s on the server (a copy of its cookie opens nothing after)
// and drops the cookie.
func (m *Sessions) Logout(ctx context.Context, w http.ResponseWriter, s *Session) error {
	if err := m.Revoke(ctx, s.ID, s.Operator); err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: m.cfg.Prefix + "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	m.cfg.Log.Info("console: logout", "operator", s.Name, "identity", s.Operator)
	return nil
}

// CSRF is the token a form of session sid carries.
func (m *Sessions) CSRF(sid string) string { return m.sign("csrf", []byte(sid)) }

// CheckPost refuses a POST that is not this session's own form: a request
// another site made (Sec-Fetch-Site, Origin) or one without the session's
// CSRF token. It parses the form (at most 1 MiB).
func (m *Sessions) CheckPost(r *http.Request, s *Session) error {
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
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(m.CSRF(s.ID))) {
		return errors.New("missing or wrong CSRF token")
	}
	return nil
}

// LoginForm ties a login form to this browser for ten minutes (a cookie)
// and returns the token the form carries.
func (m *Sessions) LoginForm(w http.ResponseWriter) string {
	pre := randomToken()
	http.SetCookie(w, &http.Cookie{Name: preCookie, Value: pre, Path: m.cfg.Prefix + "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode, MaxAge: 600})
	return m.CSRF("pre:" + pre)
}

// CheckLoginForm says the parsed login form r came from a login page this
// browser was given (LoginForm): no other site logs a browser in.
func (m *Sessions) CheckLoginForm(r *http.Request) bool {
	pre, err := r.Cookie(preCookie)
	return err == nil && hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(m.CSRF("pre:"+pre.Value)))
}

// SafeNext keeps a post-login redirect inside the console.
func (m *Sessions) SafeNext(next string) string {
	p := m.cfg.Prefix
	if !strings.HasPrefix(next, p+"/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return p + "/"
	}
	return next
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
