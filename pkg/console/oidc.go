package console

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

func (o *OIDCConfig) validate() error {
	u, err := url.Parse(o.Issuer)
	switch {
	case o.Issuer == "" || err != nil || u.Host == "":
		return fmt.Errorf("console: --console-oidc-issuer must be a URL, got %q", o.Issuer)
	case o.ClientID == "":
		return errors.New("console: --console-oidc-client-id is required")
	}
	r, err := url.Parse(o.RedirectURL)
	if err != nil || r.Host == "" || r.Path != Prefix+"/login/callback" {
		return fmt.Errorf("console: --console-oidc-redirect-url must be https://<host>%s/login/callback, got %q", Prefix, o.RedirectURL)
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

func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	if c.oidc == nil {
		c.fail(w, r, nil, http.StatusNotFound, "No identity provider is configured.")
		return
	}
	f := flow{State: randomToken(), Nonce: randomToken(), Verifier: oauth2.GenerateVerifier(),
		Next: safeNext(r.URL.Query().Get("next")), Expires: c.now().Add(10 * time.Minute)}
	v, err := c.seal("oidc", f)
	if err != nil {
		c.fail(w, r, nil, http.StatusInternalServerError, "Could not start the login.")
		return
	}
	// Lax, not Strict: the provider's redirect back is a navigation from
	// another site, which a Strict cookie would not follow.
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: v, Path: Prefix + "/login/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteLaxMode, MaxAge: 600})
	http.Redirect(w, r, c.oidc.oauth.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)), http.StatusFound)
}

func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	if c.oidc == nil {
		c.fail(w, r, nil, http.StatusNotFound, "No identity provider is configured.")
		return
	}
	var f flow
	ck, err := r.Cookie(flowCookie)
	q := r.URL.Query()
	if err != nil || !c.open("oidc", ck.Value, &f) || c.now().After(f.Expires) || q.Get("state") != f.State {
		http.Redirect(w, r, Prefix+"/login?error=expired", http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: Prefix + "/login/", MaxAge: -1, HttpOnly: true, Secure: true})
	if q.Get("error") != "" || q.Get("code") == "" {
		http.Redirect(w, r, Prefix+"/login?error=denied", http.StatusSeeOther)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	tok, err := c.oidc.oauth.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		c.log.Warn("console: OIDC code exchange", "err", err)
		http.Redirect(w, r, Prefix+"/login?error=denied", http.StatusSeeOther)
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := c.oidc.verifier.Verify(ctx, raw)
	if err != nil || idt.Nonce != f.Nonce {
		c.log.Warn("console: OIDC ID token refused", "err", err)
		http.Redirect(w, r, Prefix+"/login?error=denied", http.StatusSeeOther)
		return
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		http.Redirect(w, r, Prefix+"/login?error=denied", http.StatusSeeOther)
		return
	}
	name := claimName(claims, c.oidc.cfg.NameClaim, idt.Subject)
	role := claimRole(claims[c.oidc.cfg.RolesClaim])
	if role == NoRole {
		c.log.Warn("console: OIDC login without a console role", "operator", name, "claim", c.oidc.cfg.RolesClaim)
		http.Redirect(w, r, Prefix+"/login?error=norole", http.StatusSeeOther)
		return
	}
	// The refresh token lets the console read the role again every minute
	// (a provider that issues none: the role of the login holds until the
	// session ends or an admin revokes it).
	if err := c.startSession(r.Context(), w, oidcIdentity(idt.Issuer, idt.Subject, name), role, "oidc", tok.RefreshToken); err != nil {
		c.fail(w, r, nil, http.StatusInternalServerError, "Could not start a session.")
		return
	}
	// A page of our own moves on: a redirect here would still count as the
	// provider's cross-site navigation, and the Strict session cookie
	// would not be sent with it.
	v := &view{Nonce: nonce(), Title: "Logged in", Data: f.Next}
	w.Header().Set("Content-Security-Policy", csp(v.Nonce))
	c.render(w, http.StatusOK, "continue.html", v)
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
