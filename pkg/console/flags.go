package console

import (
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/platform/config"
)

// Flags are the console's command-line flags (admin-api).
type Flags struct {
	on           bool
	sessionKey   *config.Secret
	issuer       string
	clientID     string
	clientSecret *config.Secret
	redirectURL  string
	rolesClaim   string
	nameClaim    string
	scopes       string
}

// RegisterFlags adds the console's flags to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.BoolVar(&f.on, "console", true, "serve the operator console under /console/ (development: a local login; production: needs --console-oidc-issuer)")
	f.sessionKey = config.SecretVar(fs, "console-session-key", "key signing console sessions and CSRF tokens, the same on every admin-api replica (development: a random one per start)")
	fs.StringVar(&f.issuer, "console-oidc-issuer", "", "OIDC issuer URL for console logins (authorization code flow with PKCE)")
	fs.StringVar(&f.clientID, "console-oidc-client-id", "", "OIDC client id of the console")
	f.clientSecret = config.SecretVar(fs, "console-oidc-client-secret", "OIDC client secret of the console (empty for a public client)")
	fs.StringVar(&f.redirectURL, "console-oidc-redirect-url", "", "the console's OIDC callback as registered at the provider: https://<admin host>/console/login/callback")
	fs.StringVar(&f.rolesClaim, "console-roles-claim", "roles", "ID token claim holding console roles (viewer, operator, admin; a string or a list)")
	fs.StringVar(&f.nameClaim, "console-name-claim", "preferred_username", "ID token claim naming the operator in the audit log (then email, then sub)")
	fs.StringVar(&f.scopes, "console-oidc-scopes", "", "comma-separated scopes asked beside openid, profile and email (e.g. groups)")
	return f
}

// Config is the console's configuration for the mode, or nil when it is
// not served: turned off, or production without an OIDC issuer (logged by
// the caller's absence of a console, never served without a real login).
func (f *Flags) Config(mode *config.Mode) (*Config, error) {
	if !f.on || (!mode.Dev && f.issuer == "") {
		return nil, nil
	}
	key, err := f.sessionKey.Read()
	if err != nil {
		return nil, err
	}
	switch {
	case key == "" && mode.Dev:
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		key = string(b)
	case !mode.Dev:
		if err := config.CheckSecret(f.sessionKey.Flag(), key); err != nil {
			return nil, err
		}
	}
	cfg := &Config{Dev: mode.Dev, SessionKey: []byte(key), Process: hostname()}
	if len(cfg.SessionKey) < 32 {
		return nil, fmt.Errorf("%s must be at least 32 bytes", f.sessionKey.Flag())
	}
	if f.issuer != "" {
		secret, err := f.clientSecret.Read()
		if err != nil {
			return nil, err
		}
		cfg.OIDC = &login.OIDCConfig{Issuer: f.issuer, ClientID: f.clientID, ClientSecret: secret, RedirectURL: f.redirectURL,
			RolesClaim: f.rolesClaim, NameClaim: f.nameClaim}
		for _, sc := range strings.Split(f.scopes, ",") {
			if sc = strings.TrimSpace(sc); sc != "" {
				cfg.OIDC.Scopes = append(cfg.OIDC.Scopes, sc)
			}
		}
	}
	return cfg, cfg.Validate()
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "admin-api"
	}
	return "admin-api@" + h
}
