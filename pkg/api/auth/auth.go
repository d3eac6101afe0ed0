// Package auth verifies the API's JWT bearer tokens and carries the caller
// (the actor, from `sub`, plus the admin claim) through the request context.
// Local runs sign with HS256 and a shared secret; production verifies RS256
// against keys from a JWKS file. Everything else, alg=none included, fails.
package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/paysched/paysched/pkg/platform/config"
)

// Local defaults, used by `make up` and payctl. They are for development
// only; production sets a JWKS file and its own issuer and audience.
const (
	DefaultIssuer   = "paysched-local"
	DefaultAudience = "paysched"
	// DefaultAdminAudience is the audience of admin tokens: a token for
	// the payments API (DefaultAudience) is never an admin's, whatever
	// claims it carries.
	DefaultAdminAudience = "paysched-admin"
	// DevSecret is the published development HS256 secret: a service in
	// production mode refuses it (config.Published).
	DevSecret = config.DevJWTSecret
)

// HS256Secret is the HS256 secret payments-api verifies tokens with, ""
// for none: with a JWKS file there is none (RS256 only; NewVerifier
// refuses both). Without one, production wants a secret of its own
// (config.CheckSecret); development falls back to DevSecret.
func HS256Secret(mode *config.Mode, s *config.Secret, jwksFile string) (string, error) {
	v, err := s.Read()
	if err != nil || jwksFile != "" {
		return v, err
	}
	if v == "" && !mode.Dev {
		return "", errors.New("no token verifier: set --jwt-jwks-file (RS256, production) or --jwt-secret-file (HS256) (or --dev for a development run)")
	}
	return mode.Secret(s, DevSecret)
}

// Principal is the authenticated caller.
type Principal struct {
	// Actor is the token's subject; it is the payer of every payment it creates.
	Actor string
	// Issuer is the token's issuer (iss; empty when it names none): with
	// Actor, the identity four eyes compare.
	Issuer string
	// Name is the token's name claim, shown beside an admin's actions and
	// never compared (empty: none).
	Name string
	// Admin opens the admin API.
	Admin bool
	// Tenant is whom the actor's payments are scheduled for, as the
	// sweepers share claims fairly: the token's tenant claim, else the
	// tenant configured for its client, else the issuer's default tenant.
	// Never the actor: payer ids and tenant names are apart.
	Tenant string
	// TenantNamed: Tenant is the token's claim or its client's configured
	// tenant, not the issuer's default. Only a named tenant manages its
	// webhook endpoints (they receive every payer's events of the tenant).
	TenantNamed bool
}

// DefaultTenant is the tenant of tokens that carry no tenant claim and
// whose client has none configured (--default-tenant).
const DefaultTenant = "default"

// CheckTenant says what is wrong with a tenant name, if anything: at most
// 256 bytes of printable UTF-8, not blank.
func CheckTenant(t string) error {
	switch {
	case strings.TrimSpace(t) == "":
		return errors.New("a tenant name must not be blank")
	case len(t) > 256 || !printable(t):
		return errors.New("a tenant name is printable UTF-8 of at most 256 bytes")
	}
	return nil
}

// Claims are the token claims paysched reads.
type Claims struct {
	jwt.RegisteredClaims
	Admin bool `json:"admin,omitempty"`
	// Tenant groups actors for fair claims (a platform's many API clients).
	Tenant string `json:"tenant,omitempty"`
	// AuthorizedParty and ClientID name the OAuth client the token was
	// issued to (OIDC's azp, RFC 9068's client_id): --client-tenant maps
	// a client to its tenant.
	AuthorizedParty string `json:"azp,omitempty"`
	ClientID        string `json:"client_id,omitempty"`
	// Name is who the subject is, as shown (OIDC's name claim).
	Name string `json:"name,omitempty"`
}

// Config says which tokens to accept.
type Config struct {
	// HS256Secret enables HS256 tokens signed with it (local runs).
	HS256Secret []byte
	// JWKSFile enables RS256 tokens signed by one of its keys (production).
	JWKSFile string
	// JWKSURL, instead of JWKSFile, fetches the keys from the issuer's
	// JWKS endpoint, again every JWKSRefresh and on a token naming a key
	// it does not know (at most every few seconds).
	JWKSURL string
	// JWKSRefresh is how often the keys are read again (default 5 minutes;
	// a file too).
	JWKSRefresh time.Duration
	// Issuer must match the token's iss. A verifier accepts one kind of
	// token: payers' (Audience: the payments API's aud) or admins'
	// (AdminAudience: admin-api's aud, and the admin claim). A token for
	// the other audience is refused, whatever claims it carries.
	Issuer        string
	Audience      string
	AdminAudience string
	// MaxLifetime bounds exp - iat (default DefaultMaxLifetime): a leaked
	// token is good for at most that long.
	MaxLifetime time.Duration
	// Leeway tolerates clock skew on exp/nbf/iat.
	Leeway time.Duration
	// DefaultTenant is the tenant of a token with no tenant claim whose
	// client ClientTenants does not name ("": DefaultTenant).
	DefaultTenant string
	// ClientTenants maps a token's client (azp, else client_id) to the
	// tenant of its tokens that carry no tenant claim.
	ClientTenants map[string]string
}

// DefaultMaxLifetime is the longest lifetime (exp - iat) a token may
// have: an access token is short-lived; a leaked one must expire soon.
const DefaultMaxLifetime = time.Hour

// Verifier checks bearer tokens.
type Verifier struct {
	parser *jwt.Parser
	secret []byte
	keys   *keySet // RS256 keys, refreshed
	// aud and adminAud: the audience accepted (see Config), one of them.
	aud, adminAud string
	maxLife       time.Duration
	// defaultTenant and clientTenants: Config's.
	defaultTenant string
	clientTenants map[string]string

	// cache remembers tokens that verified, until they expire: clients send
	// the same token on every call, and parsing it dominated request CPU.
	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	p   Principal
	exp time.Time
}

// cacheSize bounds the verified-token cache; it is cleared when full.
const cacheSize = 10_000

// ErrUnauthenticated wraps every verification failure.
var ErrUnauthenticated = errors.New("unauthenticated")

// NewVerifier builds a Verifier; at least one of HS256Secret and JWKSFile
// must be set.
func NewVerifier(cfg Config) (*Verifier, error) {
	if len(cfg.HS256Secret) > 0 && cfg.JWKSFile != "" {
		// Accepting both lets a holder of the shared secret mint tokens
		// a JWKS deployment never meant to trust.
		return nil, errors.New("auth: --jwt-secret and --jwt-jwks-file are exclusive: HS256 and RS256 are never accepted together " +
			"(production: --jwt-jwks-file with --jwt-secret=''; local runs: --jwt-secret)")
	}
	if cfg.JWKSFile != "" && cfg.JWKSURL != "" {
		return nil, errors.New("auth: --jwt-jwks-file and --jwt-jwks-url are exclusive")
	}
	v := &Verifier{secret: cfg.HS256Secret, cache: map[string]cached{}, aud: cfg.Audience, adminAud: cfg.AdminAudience,
		maxLife: cfg.MaxLifetime, defaultTenant: cfg.DefaultTenant, clientTenants: cfg.ClientTenants}
	if v.defaultTenant == "" {
		v.defaultTenant = DefaultTenant
	}
	for client, t := range cfg.ClientTenants {
		if err := CheckTenant(t); err != nil {
			return nil, fmt.Errorf("auth: tenant of client %q: %w", client, err)
		}
	}
	if err := CheckTenant(v.defaultTenant); err != nil {
		return nil, fmt.Errorf("auth: default tenant: %w", err)
	}
	if v.maxLife <= 0 {
		v.maxLife = DefaultMaxLifetime
	}
	if (v.aud == "") == (v.adminAud == "") {
		return nil, errors.New("auth: a verifier accepts payers' tokens (an audience) or admins' (an admin audience), one of them")
	}
	var methods []string
	if len(cfg.HS256Secret) > 0 {
		methods = append(methods, "HS256")
	}
	if cfg.JWKSFile != "" || cfg.JWKSURL != "" {
		keys, err := newKeySet(cfg.JWKSFile, cfg.JWKSURL, cfg.JWKSRefresh)
		if err != nil {
			return nil, err
		}
		v.keys = keys
		methods = append(methods, "RS256")
	}
	if len(methods) == 0 {
		return nil, errors.New("auth: configure an HS256 secret or a JWKS file")
	}
	if cfg.Issuer == "" {
		return nil, errors.New("auth: the issuer is required")
	}
	v.parser = jwt.NewParser(
		jwt.WithValidMethods(methods),
		jwt.WithIssuer(cfg.Issuer),
		// The audience is checked in Verify: either of two is accepted.
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
	)
	return v, nil
}

// Verify checks a raw token and returns its principal.
func (v *Verifier) Verify(raw string) (Principal, error) {
	now := time.Now()
	v.mu.Lock()
	hit, ok := v.cache[raw]
	v.mu.Unlock()
	if ok && now.Before(hit.exp) {
		return hit.p, nil
	}
	var c Claims
	_, err := v.parser.ParseWithClaims(raw, &c, v.key)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if c.Subject == "" || len(c.Subject) > 256 || !printable(c.Subject) {
		return Principal{}, fmt.Errorf("%w: token has no usable sub", ErrUnauthenticated)
	}
	if c.IssuedAt == nil || c.ExpiresAt.Sub(c.IssuedAt.Time) > v.maxLife {
		return Principal{}, fmt.Errorf("%w: token lives longer than %s (exp - iat): mint shorter ones", ErrUnauthenticated, v.maxLife)
	}
	want := v.aud
	if want == "" {
		want = v.adminAud
	}
	mine := false
	for _, a := range c.Audience {
		mine = mine || a == want
	}
	if !mine {
		return Principal{}, fmt.Errorf("%w: token is for another audience", ErrUnauthenticated)
	}
	// The admin claim counts only in a token made for the admin audience,
	// which only admin-api accepts.
	if c.Tenant != "" && CheckTenant(c.Tenant) != nil {
		return Principal{}, fmt.Errorf("%w: token's tenant claim is not a printable name of at most 256 bytes", ErrUnauthenticated)
	}
	tenant, named := v.tenantOf(&c)
	p := Principal{Actor: c.Subject, Issuer: c.Issuer, Admin: c.Admin && v.adminAud != "", Tenant: tenant, TenantNamed: named}
	if printable(c.Name) && len(c.Name) <= 256 {
		p.Name = c.Name
	}
	// Cached only until exp (minus the leeway nothing): nbf and iat were
	// checked now and only move into the past.
	v.mu.Lock()
	if len(v.cache) >= cacheSize {
		clear(v.cache)
	}
	v.cache[raw] = cached{p: p, exp: c.ExpiresAt.Time}
	v.mu.Unlock()
	return p, nil
}

// tenantOf is the tenant of a verified token: its claim, else its
// client's, else the default (named false). Never its subject.
func (v *Verifier) tenantOf(c *Claims) (tenant string, named bool) {
	if c.Tenant != "" {
		return c.Tenant, true
	}
	client := c.AuthorizedParty
	if client == "" {
		client = c.ClientID
	}
	if t, ok := v.clientTenants[client]; ok && client != "" {
		return t, true
	}
	return v.defaultTenant, false
}

// printable reports whether s is valid UTF-8 without control characters:
// the actor is stored as text (where NUL is refused) and written to logs.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// VerifyHeader checks an Authorization header value ("Bearer <jwt>").
func (v *Verifier) VerifyHeader(h string) (Principal, error) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(tok) == "" {
		return Principal{}, fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	return v.Verify(strings.TrimSpace(tok))
}

func (v *Verifier) key(t *jwt.Token) (any, error) {
	// The token says what it is: an access token (JWT, or RFC 9068's
	// at+jwt), never an ID token or another kind a signer also issues.
	if typ, _ := t.Header["typ"].(string); !strings.EqualFold(typ, "JWT") && !strings.EqualFold(typ, "at+jwt") {
		return nil, fmt.Errorf("token type %q is not an access token (typ JWT or at+jwt)", typ)
	}
	switch t.Method.Alg() {
	case "HS256":
		if len(v.secret) == 0 {
			return nil, errors.New("HS256 not accepted")
		}
		return v.secret, nil
	case "RS256":
		if v.keys == nil {
			return nil, errors.New("RS256 not accepted")
		}
		return v.keys.keyFor(t)
	}
	return nil, fmt.Errorf("algorithm %q not accepted", t.Method.Alg())
}

// Mint signs an HS256 token for actor; payctl uses it for local dev tokens.
// An admin token must be minted for the admin audience.
func Mint(secret []byte, issuer, audience, actor string, admin bool, ttl time.Duration) (string, error) {
	return MintFor(secret, issuer, audience, actor, "", admin, ttl)
}

// MintFor is Mint with a tenant claim ("": none, the verifier's default
// or the client's tenant).
func MintFor(secret []byte, issuer, audience, actor, tenant string, admin bool, ttl time.Duration) (string, error) {
	now := time.Now()
	c := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   actor,
			Issuer:    issuer,
			Audience:  jwt.ClaimStrings{audience},
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Admin:  admin,
		Tenant: tenant,
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("mint token: %w", err)
	}
	return s, nil
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal set by the interceptor or the REST
// middleware.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}
