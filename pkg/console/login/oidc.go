package login

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// OIDCConfig is the production login: OpenID Connect authorization code
// flow with PKCE.
type OIDCConfig struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	// RedirectURL is this console's callback as the provider knows it:
	// https://<admin host>/console/login/callback.
	RedirectURL string
	// RolesClaim names the ID token claim (a string or a list) that holds
	// the operator's console roles: viewer, operator, admin (the highest
	// wins). Default "roles".
	RolesClaim string
	// NameClaim names the claim shown and audited as the operator
	// (default "preferred_username", then "email", then "sub").
	NameClaim string
	// Scopes are asked beside openid, profile and email (some providers
	// put roles in the token only for a scope such as "groups").
	Scopes []string
}

// Validate checks the configuration; prefix is the console's path, under
// which the callback must be.
func (o *OIDCConfig) Validate(prefix string) error {
	u, err := url.Parse(o.Issuer)
	switch {
	case o.Issuer == "" || err != nil || u.Host == "":
		return fmt.Errorf("console: --console-oidc-issuer must be a URL, got %q", o.Issuer)
	case o.ClientID == "":
		return errors.New("console: --console-oidc-client-id is required")
	}
	r, err := url.Parse(o.RedirectURL)
	if err != nil || r.Host == "" || r.Path != prefix+"/login/callback" {
		return fmt.Errorf("console: --console-oidc-redirect-url must be https://<host>%s/login/callback, got %q", prefix, o.RedirectURL)
	}
	return nil
}

type oidcLogin struct {
	cfg      OIDCConfig
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
}

func newOIDC(ctx context.Context, cfg OIDCConfig) (*oidcLogin, error) {
	if cfg.RolesClaim == "" {
		cfg.RolesClaim = "roles"
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	p, err := oidc.NewProvider(dctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("console: OIDC discovery at %s: %w", cfg.Issuer, err)
	}
	return &oidcLogin{cfg: cfg, verifier: p.Verifier(&oidc.Config{ClientID: cfg.ClientID}),
		oauth: oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Endpoint: p.Endpoint(),
			RedirectURL: cfg.RedirectURL, Scopes: append([]string{oidc.ScopeOpenID, "profile", "email"}, cfg.Scopes...)}}, nil
}

// flow is one login in progress, kept in a signed cookie for ten minutes.
type flow struct {
	State    string    `json:"state"`
	Nonce    string    `json:"nonce"`
	Verifier string    `json:"verifier"`
	Next     string    `json:"next"`
	Expires  time.Time `json:"exp"`
}

// The refusals FinishOIDC answers, as the login page's error parameter.
const (
	// RefusedExpired: the login took too long or was started elsewhere.
	RefusedExpired = "expired"
	// RefusedDenied: the identity provider refused the login.
	RefusedDenied = "denied"
	// RefusedNoRole: the identity provider gave no console role.
	RefusedNoRole = "norole"
)

// BeginOIDC starts a login at the identity provider: it keeps the flow in
// a cookie and returns where to send the browser. next is where to go
// after (SafeNext). It needs OIDC().
func (m *Sessions) BeginOIDC(w http.ResponseWriter, next string) (string, error) {
	if m.oidc == nil {
		return "", errors.New("no identity provider is configured")
	}
	f := flow{State: randomToken(), Nonce: randomToken(), Verifier: oauth2.GenerateVerifier(),
		Next: m.SafeNext(next), Expires: m.cfg.Now().Add(10 * time.Minute)}
	v, err := m.seal("oidc", f)
	if err != nil {
		return "", fmt.Errorf("begin login: %w", err)
	}
	// Lax, not Strict: the provider's redirect back is a navigation from
	// another site, which a Strict cookie would not follow.
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: v, Path: m.cfg.Prefix + "/login/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteLaxMode, MaxAge: 600})
	return m.oidc.oauth.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)), nil
}

// FinishOIDC takes the provider's redirect back (r): it checks the flow,
// exchanges the code, verifies the ID token and starts the session with
// the role the token names. It returns where to go on, or a refusal (one
// of the Refused constants) for the login page, or an error of its own.
func (m *Sessions) FinishOIDC(w http.ResponseWriter, r *http.Request) (next, refusal string, _ error) {
	if m.oidc == nil {
		return "", "", errors.New("no identity provider is configured")
	}
	var f flow
	ck, err := r.Cookie(flowCookie)
	q := r.URL.Query()
	if err != nil || !m.open("oidc", ck.Value, &f) || m.cfg.Now().After(f.Expires) || q.Get("state") != f.State {
		return "", RefusedExpired, nil
	}
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: m.cfg.Prefix + "/login/", MaxAge: -1, HttpOnly: true, Secure: true})
	if q.Get("error") != "" || q.Get("code") == "" {
		return "", RefusedDenied, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	tok, err := m.oidc.oauth.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		m.cfg.Log.Warn("console: OIDC code exchange", "err", err)
		return "", RefusedDenied, nil
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := m.oidc.verifier.Verify(ctx, raw)
	if err != nil || idt.Nonce != f.Nonce {
		m.cfg.Log.Warn("console: OIDC ID token refused", "err", err)
		return "", RefusedDenied, nil
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return "", RefusedDenied, nil
	}
	name := claimName(claims, m.oidc.cfg.NameClaim, idt.Subject)
	role := claimRole(claims[m.oidc.cfg.RolesClaim])
	if role == NoRole {
		m.cfg.Log.Warn("console: OIDC login without a console role", "operator", name, "claim", m.oidc.cfg.RolesClaim)
		return "", RefusedNoRole, nil
	}
	// The refresh token lets the console read the role again every minute
	// (a provider that issues none: the role of the login holds until the
	// session ends or an admin revokes it).
	if err := m.Start(r.Context(), w, oidcIdentity(idt.Issuer, idt.Subject, name), role, "oidc", tok.RefreshToken); err != nil {
		return "", "", err
	}
	return f.Next, "", nil
}

func claimName(claims map[string]any, named, sub string) string {
	for _, k := range []string{named, "preferred_username", "email"} {
		if s, ok := claims[k].(string); ok && k != "" && s != "" {
			return clip(s, 64)
		}
	}
	return clip(sub, 64)
}

// claimRole is the highest console role a claim value names: a string
// ("admin", or space separated) or a list of strings.
func claimRole(v any) Role {
	var names []string
	switch t := v.(type) {
	case string:
		names = strings.Fields(t)
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok {
				names = append(names, s)
			}
		}
	}
	best := NoRole
	for _, n := range names {
		best = max(best, ParseRole(n))
	}
	return best
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}
