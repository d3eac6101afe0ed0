package console

import (
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/config"
)

// Flags are the console's command-line flags (admin-api).
type Flags struct {
	on              bool
	sessionKey      *config.Secret
	issuer          string
	clientID        string
	clientSecret    *config.Secret
	redirectURL     string
	rolesClaim      string
	nameClaim       string
	scopes          string
	approvalAmount  int64
	approvalAmounts string
	approvalWindow  time.Duration
	approvalCount   int
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
	fs.Int64Var(&f.approvalAmount, "console-approval-amount", 100000, "minor units of the payment's currency: an action on one payment of at least this amount, or one taking the operator's running total in that currency to it, waits for a second operator's approval (more than one payment always does)")
	fs.StringVar(&f.approvalAmounts, "console-approval-amounts", "", "per-currency approval amounts overriding --console-approval-amount, in each currency's minor units: EUR=100000,JPY=15000000")
	fs.DurationVar(&f.approvalWindow, "console-approval-window", time.Hour, "window of an operator's running totals: their single actions that ran without approval in it are counted and totalled per currency")
	fs.IntVar(&f.approvalCount, "console-approval-count", 10, "single actions an operator may run without approval per --console-approval-window; the next waits for a second operator")
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
	amounts, err := parseAmounts(f.approvalAmounts)
	if err != nil {
		return nil, err
	}
	cfg := &Config{Dev: mode.Dev, SessionKey: []byte(key), ApprovalAmount: f.approvalAmount, ApprovalAmounts: amounts,
		ApprovalWindow: f.approvalWindow, ApprovalCount: f.approvalCount, Process: hostname()}
	if f.approvalWindow <= 0 || f.approvalCount <= 0 {
		return nil, fmt.Errorf("--console-approval-window and --console-approval-count must be positive, got %s and %d", f.approvalWindow, f.approvalCount)
	}
	if len(cfg.SessionKey) < 32 {
		return nil, fmt.Errorf("%s must be at least 32 bytes", f.sessionKey.Flag())
	}
	if f.issuer != "" {
		secret, err := f.clientSecret.Read()
		if err != nil {
			return nil, err
		}
		cfg.OIDC = &OIDCConfig{Issuer: f.issuer, ClientID: f.clientID, ClientSecret: secret, RedirectURL: f.redirectURL,
			RolesClaim: f.rolesClaim, NameClaim: f.nameClaim}
		for _, sc := range strings.Split(f.scopes, ",") {
			if sc = strings.TrimSpace(sc); sc != "" {
				cfg.OIDC.Scopes = append(cfg.OIDC.Scopes, sc)
			}
		}
	}
	return cfg, cfg.Validate()
}

// parseAmounts reads --console-approval-amounts: CUR=minor,...
func parseAmounts(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		cur, amt, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(strings.TrimSpace(amt), 10, 64)
		cur = strings.ToUpper(strings.TrimSpace(cur))
		if !ok || err != nil || n < 0 || !payment.Known(cur) {
			return nil, fmt.Errorf("--console-approval-amounts: %q is not CUR=minor units (an ISO 4217 code and a non-negative amount)", kv)
		}
		out[cur] = n
	}
	return out, nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "admin-api"
	}
	return "admin-api@" + h
}
