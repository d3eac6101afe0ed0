// Package console is the operator console: server-rendered pages under
// /console/ on admin-api, where payments people see the schedule, find a
// payment, act on dead letters (four eyes on anything that moves money in
// bulk or above a threshold) and close the books.
//
// It reads the schedule only through bounded, indexed statements and
// background caches (never a COUNT(*) of the table per request), and it
// moves money only through Actions: the admin service, which asks the
// gateway first under the engine's rules.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

//go:embed templates/*.html static/*
var files embed.FS

// Prefix is where the console is served.
const Prefix = "/console"

// Actions are the money-moving operator actions, as the admin service
// performs them (probe first, fenced move, audited as the operator). Each
// acts on the dead letter id only while it is dead-lettered at attempt,
// as the request pinned it (attempt < 0: at any attempt), and otherwise
// answers apierr.ReasonChangedSinceRequest: the approver approved that
// dead letter, not what it became since.
type Actions interface {
	approval.Actor
	// Reconcile starts a reconciliation run of day; it shows in
	// reconciliation_runs while it runs.
	Reconcile(ctx context.Context, operator string, day time.Time) error
}

// Config configures the console.
type Config struct {
	// Dev allows the local login (any name, any role): development only.
	Dev bool
	// SessionKey signs session cookies and CSRF tokens (at least 32
	// bytes). Every admin-api replica needs the same one.
	SessionKey []byte
	// SessionTTL is how long a login lasts (default 8 h).
	SessionTTL time.Duration
	// OIDC, if set, is the production login.
	OIDC *login.OIDCConfig
	// Requests are the operators' requests the console makes and shows
	// (admin-api's, whose runner applies them). Nil: its own, under
	// Policy.
	Requests *approval.Requests
	// Policy is the four-eyes policy of its own requests (zero: strict).
	Policy approval.Policy
	// Admit, if set, is the limiter the REST API's calls go through (per
	// operator identity): every action the console takes (a POST) goes
	// through it too, refused 429 past the rate, as the API refuses.
	Admit func(operator string) (bool, time.Duration)
	// Process names this replica as a runner of bulk requests.
	Process string
	// AuditDB, if set, is the audit log's database (a payment's history).
	AuditDB pgdb.DB
	// HooksDB is the webhooks' database (nil: the schedule's).
	HooksDB pgdb.DB
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case len(c.SessionKey) < 32:
		return fmt.Errorf("console: the session key must be at least 32 bytes, got %d", len(c.SessionKey))
	case !c.Dev && c.OIDC == nil:
		return errors.New("console: production needs an OIDC login (--console-oidc-issuer ...) or no console (--console=false)")
	case c.SessionTTL < 0 || c.SessionTTL > 24*time.Hour:
		return fmt.Errorf("console: session TTL must be between 0 and 24h, got %s", c.SessionTTL)
	}
	if c.OIDC != nil {
		if err := c.OIDC.Validate(Prefix); err != nil {
			return err
		}
	}
	return nil
}

// Console serves the pages.
type Console struct {
	cfg     Config
	db      *pgxpool.Pool
	actions Actions
	// requests are the operators' requests (package approval).
	requests *approval.Requests
	log      *slog.Logger
	tmpl     map[string]*template.Template
	cache    *cache
	// login is who is there: sessions, cookies, CSRF, OIDC.
	login *login.Sessions
	mux   *http.ServeMux
	// now is the clock (tests move it).
	now func() time.Time
}

// New returns the console. ctx bounds the OIDC discovery.
func New(ctx context.Context, cfg Config, db *pgxpool.Pool, actions Actions, log *slog.Logger) (*Console, error) {
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.Process == "" {
		cfg.Process = "admin-api"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, db: db, actions: actions, log: log, now: time.Now, requests: cfg.Requests}
	var err error
	if c.requests == nil {
		if cfg.Policy.Window == 0 {
			cfg.Policy = approval.Strict()
		}
		if c.requests, err = approval.New(db, cfg.Policy, log); err != nil {
			return nil, err
		}
	}
	if c.tmpl, err = parseTemplates(); err != nil {
		return nil, err
	}
	c.cache = newCache(db, log)
	if c.login, err = login.New(ctx, login.Config{Key: cfg.SessionKey, TTL: cfg.SessionTTL, OIDC: cfg.OIDC, Prefix: Prefix,
		Now: func() time.Time { return c.now() }, Log: log}, db); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		// A bug in one page must not take the process down nor leak a
		// stack: log it, answer a plain 500.
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			c.log.Error("console: panic", "path", r.URL.Path, "panic", v)
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	secureHeaders(w)
	c.mux.ServeHTTP(w, r)
}

// Run keeps the caches fresh until ctx ends (admin-api's runner applies
// the requests).
func (c *Console) Run(ctx context.Context) error {
	c.cache.run(ctx)
	return nil
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.Handle("GET "+Prefix+"/static/", http.StripPrefix(Prefix, http.FileServerFS(files)))
	m.HandleFunc("GET "+Prefix+"/login", c.loginPage)
	m.HandleFunc("POST "+Prefix+"/login/dev", c.devLogin)
	m.HandleFunc("GET "+Prefix+"/login/oidc", c.oidcStart)
	m.HandleFunc("GET "+Prefix+"/login/callback", c.oidcCallback)
	m.HandleFunc("POST "+Prefix+"/logout", c.page(login.Viewer, c.logout))
	m.HandleFunc("GET "+Prefix+"/{$}", c.page(login.Viewer, c.overview))
	m.HandleFunc("GET "+Prefix+"/payments", c.page(login.Viewer, c.payments))
	m.HandleFunc("GET "+Prefix+"/payments/{id}", c.page(login.Viewer, c.paymentPage))
	m.HandleFunc("GET "+Prefix+"/payments.csv", c.page(login.Viewer, c.exportPayments))
	m.HandleFunc("GET "+Prefix+"/dead-letters.csv", c.page(login.Viewer, c.exportDead))
	m.HandleFunc("GET "+Prefix+"/reconciliation/{run}/items.csv", c.page(login.Viewer, c.exportRecon))
	m.HandleFunc("POST "+Prefix+"/payments/{id}/action", c.page(login.Operator, c.paymentAction))
	m.HandleFunc("GET "+Prefix+"/dead-letters", c.page(login.Viewer, c.deadLetters))
	m.HandleFunc("POST "+Prefix+"/dead-letters/preview", c.page(login.Operator, c.bulkPreview))
	m.HandleFunc("POST "+Prefix+"/payments/preview", c.page(login.Operator, c.bulkPreview))
	m.HandleFunc("POST "+Prefix+"/requests", c.page(login.Operator, c.bulkRequest))
	m.HandleFunc("GET "+Prefix+"/requests", c.page(login.Viewer, c.requestsPage))
	m.HandleFunc("GET "+Prefix+"/actions", c.page(login.Viewer, c.actionsPage))
	m.HandleFunc("GET "+Prefix+"/schedules", c.page(login.Viewer, c.schedulesPage))
	m.HandleFunc("GET "+Prefix+"/schedules/{id}", c.page(login.Viewer, c.schedulePage))
	m.HandleFunc("POST "+Prefix+"/schedules/{id}/requests", c.page(login.Operator, c.requestSchedule))
	m.HandleFunc("POST "+Prefix+"/schedules/{id}/requests/{rid}/decide", c.page(login.Admin, c.decideSchedule))
	m.HandleFunc("GET "+Prefix+"/tenants", c.page(login.Viewer, c.tenantsPage))
	m.HandleFunc("GET "+Prefix+"/tenants/{tenant}", c.page(login.Viewer, c.tenantPage))
	m.HandleFunc("POST "+Prefix+"/tenants/{tenant}/limits", c.page(login.Admin, c.requestLimits))
	m.HandleFunc("POST "+Prefix+"/tenants/{tenant}/limits/{id}/decide", c.page(login.Admin, c.decideLimits))
	m.HandleFunc("GET "+Prefix+"/requests/{id}", c.page(login.Viewer, c.requestPage))
	m.HandleFunc("POST "+Prefix+"/requests/{id}/decide", c.page(login.Admin, c.decide))
	m.HandleFunc("GET "+Prefix+"/webhooks/{id}", c.page(login.Viewer, c.endpointPage))
	m.HandleFunc("POST "+Prefix+"/webhooks/{id}/resend", c.page(login.Operator, c.resendWebhook))
	m.HandleFunc("POST "+Prefix+"/webhooks/{id}/recover", c.page(login.Operator, c.recoverWebhooks))
	m.HandleFunc("POST "+Prefix+"/webhooks/{id}/requests/{rid}/decide", c.page(login.Admin, c.decideEndpointRequest))
	m.HandleFunc("GET "+Prefix+"/reconciliation", c.page(login.Viewer, c.reconPage))
	m.HandleFunc("POST "+Prefix+"/reconciliation", c.page(login.Operator, c.reconStart))
	m.HandleFunc("GET "+Prefix+"/gateway", c.page(login.Viewer, c.gatewayPage))
	m.HandleFunc("GET "+Prefix+"/sessions", c.page(login.Admin, c.sessionsPage))
	m.HandleFunc("POST "+Prefix+"/sessions/revoke", c.page(login.Admin, c.revokeOperator))
	m.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, http.StatusNotFound, "No such page.")
	})
	m.HandleFunc("GET "+Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
	})
	c.mux = m
}

// page wraps a handler: a session of at least role, a CSP nonce, on POST a
// valid CSRF token from this origin, and pageTimeout on the request's
// context.
func (c *Console) page(role login.Role, h func(w http.ResponseWriter, r *http.Request, v *view)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.login.Current(r)
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, Prefix+"/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.fail(w, r, nil, http.StatusUnauthorized, "Your session has ended: log in again.")
			return
		}
		v := &view{Session: s, Nonce: nonce(), CSRF: c.login.CSRF(s.ID), Path: r.URL.Path}
		w.Header().Set("Content-Security-Policy", csp(v.Nonce))
		if r.Method == http.MethodPost {
			if err := c.login.CheckPost(r, s); err != nil {
				c.log.Warn("console: refused POST", "path", r.URL.Path, "operator", s.Name, "err", err)
				c.fail(w, r, v, http.StatusForbidden, "This form is not valid any more (it came from elsewhere, or your session changed). Reload the page and try again.")
				return
			}
		}
		if s.Role < role {
			c.fail(w, r, v, http.StatusForbidden, fmt.Sprintf("This needs the %s role; you are %s.", role, s.Role))
			return
		}
		if r.Method == http.MethodPost && role >= login.Operator && c.cfg.Admit != nil {
			// The console's actions count against the operator's rate
			// as the API's calls do: splitting work into many small
			// actions does not get past the limit.
			if ok, wait := c.cfg.Admit(s.Operator); !ok {
				secs := int64((wait + time.Second - 1) / time.Second)
				w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
				c.fail(w, r, v, http.StatusTooManyRequests, fmt.Sprintf("Too many actions at once: try again in %s.", wait.Round(time.Second)))
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
		defer cancel()
		h(w, r.WithContext(ctx), v)
	}
}

// view is what every template gets.
type view struct {
	Session *login.Session
	Nonce   string
	CSRF    string
	Path    string
	Title   string
	Error   string
	Flash   string
	Refresh int // seconds; 0: no automatic refresh
	// Live refreshes the page's main part in place every Live seconds
	// (a script: paused while the tab is hidden); 0: none.
	Live int
	Data any
}

// render writes template name with v.
func (c *Console) render(w http.ResponseWriter, status int, name string, v *view) {
	t, ok := c.tmpl[name]
	if !ok {
		panic("console: no template " + name)
	}
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", v); err != nil {
		c.log.Error("console: render", "template", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail answers an error page: a clear message, never a stack.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, v *view, status int, msg string) {
	if v == nil {
		v = &view{Nonce: nonce(), Path: r.URL.Path}
		if s, ok := c.login.Current(r); ok {
			v.Session, v.CSRF = s, c.login.CSRF(s.ID)
		}
		w.Header().Set("Content-Security-Policy", csp(v.Nonce))
	}
	v.Title, v.Error = http.StatusText(status), msg
	c.render(w, status, "error.html", v)
}

func secureHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// csp allows only this origin's files and the page's own nonced style
// and script (which may fetch this origin's pages: live refresh): no
// inline handlers, no third-party code, no framing.
func csp(nonce string) string {
	return "default-src 'none'; img-src 'self' data:; style-src 'self' 'nonce-" + nonce + "'; script-src 'nonce-" + nonce +
		"'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}
