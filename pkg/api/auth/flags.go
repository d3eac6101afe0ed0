package auth

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/paysched/paysched/pkg/platform/config"
)

// Flags are an API process's token flags: payments-api's (payers' tokens)
// or admin-api's (admins' tokens).
type Flags struct {
	admin    bool
	secret   *config.Secret
	jwksFile string
	jwksURL  string
	refresh  time.Duration
	issuer   string
	audience string
	maxLife  time.Duration

	defaultTenant string
	clientTenants tenantMap
}

// tenantMap is --client-tenant, repeated: CLIENT=TENANT.
type tenantMap map[string]string

func (m tenantMap) String() string { return fmt.Sprint(map[string]string(m)) }

func (m tenantMap) Set(v string) error {
	client, tenant, ok := strings.Cut(v, "=")
	if !ok || client == "" || tenant == "" {
		return fmt.Errorf("want CLIENT=TENANT, got %q", v)
	}
	if err := CheckTenant(tenant); err != nil {
		return err
	}
	m[client] = tenant
	return nil
}

// RegisterFlags adds the token flags to fs; admin: the process accepts
// admin tokens (--jwt-admin-audience), else payers' (--jwt-audience).
func RegisterFlags(fs *flag.FlagSet, admin bool) *Flags {
	f := &Flags{admin: admin}
	f.secret = config.SecretVar(fs, "jwt-secret", "HS256 secret of bearer tokens (local runs); never together with a JWKS")
	fs.StringVar(&f.jwksFile, "jwt-jwks-file", "", "JWKS file with the RS256 keys that sign bearer tokens (production); read again every --jwt-jwks-refresh and on an unknown key id")
	fs.StringVar(&f.jwksURL, "jwt-jwks-url", "", "the issuer's JWKS URL (https), instead of --jwt-jwks-file; fetched again every --jwt-jwks-refresh and on an unknown key id (at most every 10 s)")
	fs.DurationVar(&f.refresh, "jwt-jwks-refresh", 5*time.Minute, "how often the JWKS is read again")
	fs.StringVar(&f.issuer, "jwt-issuer", DefaultIssuer, "required token issuer")
	if admin {
		fs.StringVar(&f.audience, "jwt-admin-audience", DefaultAdminAudience, "audience of admin tokens (with the admin claim): the only tokens this API accepts")
	} else {
		fs.StringVar(&f.audience, "jwt-audience", DefaultAudience, "audience of the payers' tokens: the only tokens this API accepts (admin tokens are refused)")
	}
	fs.DurationVar(&f.maxLife, "jwt-max-lifetime", DefaultMaxLifetime, "longest lifetime (exp - iat) of a token accepted")
	if !admin {
		f.clientTenants = tenantMap{}
		fs.StringVar(&f.defaultTenant, "default-tenant", DefaultTenant, "tenant of a token with no tenant claim and no --client-tenant for its client: one fair share for all such callers (never the payer)")
		fs.Var(f.clientTenants, "client-tenant", "CLIENT=TENANT, repeatable: the tenant of tokens whose client (azp, else client_id) is CLIENT and that carry no tenant claim")
	}
	return f
}

// Config is the verifier's configuration in mode (production wants a
// JWKS, or an HS256 secret of its own).
func (f *Flags) Config(mode *config.Mode) (Config, error) {
	jwks := f.jwksFile
	if jwks == "" {
		jwks = f.jwksURL
	}
	hs256, err := HS256Secret(mode, f.secret, jwks)
	if err != nil {
		return Config{}, err
	}
	if !f.admin {
		if err := CheckTenant(f.defaultTenant); err != nil {
			return Config{}, fmt.Errorf("--default-tenant: %w", err)
		}
	}
	c := Config{HS256Secret: []byte(hs256), JWKSFile: f.jwksFile, JWKSURL: f.jwksURL, JWKSRefresh: f.refresh,
		Issuer: f.issuer, MaxLifetime: f.maxLife, Leeway: 30 * time.Second,
		DefaultTenant: f.defaultTenant, ClientTenants: f.clientTenants}
	if len(c.HS256Secret) == 0 {
		c.HS256Secret = nil
	}
	if f.admin {
		c.AdminAudience = f.audience
	} else {
		c.Audience = f.audience
	}
	return c, nil
}
