package config

import (
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Development secrets published in this repository (the local stack's
// fallbacks, docker-compose, the dev overlay). Production refuses them, and
// every other value that starts with DevPrefix.
const (
	DevPrefix        = "paysched-dev-"
	DevJWTSecret     = DevPrefix + "secret-do-not-use-in-production"
	DevCursorSecret  = DevPrefix + "cursor-secret"
	DevWebhookSecret = DevPrefix + "webhook-secret"
)

// MinSecretLen is the shortest HMAC secret production accepts: 32 bytes,
// the output size of the SHA-256 that every paysched HMAC uses.
const MinSecretLen = 32

// Mode is a service's posture. Production, the default, refuses to start
// with a missing, published or short secret, a plaintext internal hop or a
// database connection that does not verify the server, and names the flag.
// Development (--dev: make up, the tests, the dev overlays) accepts all of
// them and falls back to the published development secrets.
type Mode struct {
	Dev bool
}

// RegisterMode adds --dev to fs.
func RegisterMode(fs *flag.FlagSet) *Mode {
	m := &Mode{}
	fs.BoolVar(&m.Dev, "dev", false, "development mode: accept published development secrets, plaintext internal hops and unverified database connections (make up, tests); never in production")
	return m
}

// Announce logs the mode once at start, loudly when it is development.
func (m *Mode) Announce(log *slog.Logger) {
	if m.Dev {
		log.Warn("development mode (--dev): development secrets and plaintext hops are accepted; never run production like this")
	}
}

// Require returns err outside development when protected is false: a hop
// that production insists on encrypting and authenticating.
func (m *Mode) Require(protected bool, err error) error {
	if m.Dev || protected {
		return nil
	}
	return fmt.Errorf("%w (or --dev for a development run)", err)
}

// Published reports whether v is a development secret published in this
// repository.
func Published(v string) bool {
	return strings.HasPrefix(v, DevPrefix)
}

// Secret is a secret flag pair: --name takes the value (or PAYSCHED_NAME),
// --name-file a file holding it (the Kubernetes Secret mount).
type Secret struct {
	Name  string
	Value string
	File  string
}

// SecretVar adds --name and --name-file to fs.
func SecretVar(fs *flag.FlagSet, name, usage string) *Secret {
	s := &Secret{Name: name}
	fs.StringVar(&s.Value, name, "", usage+" (prefer --"+name+"-file: a value on the command line shows in ps)")
	fs.StringVar(&s.File, name+"-file", "", "file holding --"+name+"; surrounding whitespace is trimmed")
	return s
}

// Flag is the secret's flag as users type it.
func (s *Secret) Flag() string { return "--" + s.Name }

// Read returns the secret: the file's content, the value, or "" when
// neither is set. Both set is an error: which one wins would be a guess.
func (s *Secret) Read() (string, error) {
	switch {
	case s.File != "" && s.Value != "":
		return "", fmt.Errorf("%s and %s-file are both set: give one", s.Flag(), s.Flag())
	case s.File != "":
		v, err := ReadSecret(s.File)
		if err != nil {
			return "", fmt.Errorf("%s-file: %w", s.Flag(), err)
		}
		return v, nil
	}
	return s.Value, nil
}

// Secret reads s and checks it for the mode. Production refuses it
// missing, published or shorter than MinSecretLen; development returns
// devDefault for a missing one. The value never appears in an error.
func (m *Mode) Secret(s *Secret, devDefault string) (string, error) {
	v, err := s.Read()
	if err != nil {
		return "", err
	}
	if m.Dev {
		if v == "" {
			v = devDefault
		}
		return v, nil
	}
	return v, CheckSecret(s.Flag(), v)
}

// CheckSecret is production's rule for a secret given by flag: set, not
// published, at least MinSecretLen bytes.
func CheckSecret(flag, v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is missing: set it, or %s-file (or --dev for a development run)", flag, flag)
	case Published(v):
		return fmt.Errorf("%s is a development secret published in the paysched repository: production needs its own (or --dev for a development run)", flag)
	case len(v) < MinSecretLen:
		return fmt.Errorf("%s is %d bytes: production needs at least %d random bytes (e.g. openssl rand -base64 32)", flag, len(v), MinSecretLen)
	}
	return nil
}

// DatabaseURL checks a Postgres URL for the mode: production wants TLS
// that verifies the server's certificate and name (sslmode=verify-full),
// unless the host is a Unix socket directory (a local socket never leaves
// the machine), and no published password.
func (m *Mode) DatabaseURL(flag, raw string) error {
	cfg, err := pgconn.ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	if m.Dev {
		return nil
	}
	if Published(cfg.Password) {
		return fmt.Errorf("%s carries a development password published in the paysched repository (or --dev for a development run)", flag)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return nil
	}
	if mode := sslMode(raw); mode != "verify-full" {
		if mode == "" {
			mode = "not set (prefer)"
		}
		return fmt.Errorf("%s: sslmode is %s: production connects with sslmode=verify-full (and sslrootcert), or over a Unix socket (or --dev for a development run)", flag, mode)
	}
	return nil
}

// sslMode is the sslmode a URL or keyword/value string asks for, else
// PGSSLMODE's; pgconn's parsed config keeps only what it implies.
func sslMode(raw string) string {
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		if u, err := url.Parse(raw); err == nil && u.Query().Has("sslmode") {
			return u.Query().Get("sslmode")
		}
	} else {
		for _, kv := range strings.Fields(raw) {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "sslmode" {
				return strings.Trim(v, "'")
			}
		}
	}
	return os.Getenv("PGSSLMODE")
}
