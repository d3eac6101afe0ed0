// Package kafkaauth holds the flags every paysched Kafka client shares for
// a secured broker: TLS (the broker's CA, an optional client certificate)
// and SASL (SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN), and turns them into
// franz-go client options. Secrets are read from files and never logged
// or put in an error.
package kafkaauth

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/paysched/paysched/pkg/platform/config"
)

// SASL mechanisms.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	Plain       = "PLAIN"
)

// Flags say how a Kafka client secures its connections. The zero value is
// plaintext without SASL, the local stack's broker.
type Flags struct {
	TLS        bool
	CAFile     string
	ServerName string
	CertFile   string
	KeyFile    string

	Mechanism    string
	Username     string
	PasswordFile string
	// AllowPlaintextSASL lets SASL run over a connection without TLS.
	AllowPlaintextSASL bool
}

// Register adds the Kafka security flags to fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.BoolVar(&f.TLS, "kafka-tls", false, "connect to the Kafka brokers with TLS (system CAs unless --kafka-ca-file)")
	fs.StringVar(&f.CAFile, "kafka-ca-file", "", "PEM CA bundle the brokers' certificates must chain to; implies --kafka-tls")
	fs.StringVar(&f.ServerName, "kafka-server-name", "", "name the brokers' certificates must carry (default: each broker's host); implies --kafka-tls")
	fs.StringVar(&f.CertFile, "kafka-cert-file", "", "PEM client certificate for mutual TLS (with --kafka-key-file); implies --kafka-tls")
	fs.StringVar(&f.KeyFile, "kafka-key-file", "", "PEM private key of --kafka-cert-file")
	fs.StringVar(&f.Mechanism, "kafka-sasl-mechanism", "", "SASL mechanism: empty (none), SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN; refused without TLS unless --kafka-allow-plaintext-sasl")
	fs.StringVar(&f.Username, "kafka-username", "", "SASL user name (with --kafka-sasl-mechanism)")
	fs.StringVar(&f.PasswordFile, "kafka-password-file", "", "file holding the SASL password (with --kafka-sasl-mechanism); surrounding whitespace is trimmed")
	fs.BoolVar(&f.AllowPlaintextSASL, "kafka-allow-plaintext-sasl", false, "allow SASL without TLS: the records, and with PLAIN the password, cross the network in the clear (local brokers only)")
	return f
}

// tls reports whether the connection uses TLS: asked for, or implied by a
// TLS-only setting.
func (f *Flags) tls() bool {
	return f.TLS || f.CAFile != "" || f.ServerName != "" || f.CertFile != "" || f.KeyFile != ""
}

// Validate reports a configuration that cannot work or is unsafe, naming
// the flag; it reads the files the flags name, so a missing or empty one
// is reported before anything connects.
func (f *Flags) Validate() error {
	_, err := f.Opts()
	return err
}

// ValidateFor is Validate plus the mode's rules: outside development the
// brokers are reached over TLS and the client proves who it is (SASL or a
// client certificate), since the ACLs that keep other clients from forging
// CDC events rest on that identity.
func (f *Flags) ValidateFor(m *config.Mode) error {
	if err := f.Validate(); err != nil {
		return err
	}
	return f.requireFor(m)
}

// requireFor is the mode's rule of ValidateFor alone.
func (f *Flags) requireFor(m *config.Mode) error {
	return m.Require(f.tls() && !f.AllowPlaintextSASL && (f.Mechanism != "" || f.CertFile != ""),
		errors.New("the Kafka connection is plaintext or anonymous: production needs --kafka-tls (or --kafka-ca-file) and a client identity, --kafka-sasl-mechanism with --kafka-username and --kafka-password-file, or --kafka-cert-file"))
}

// OptsFor is Opts under the mode's rules (ValidateFor): what a service's
// main asks for before anything connects, so that a missing password or
// CA file, or a plaintext connection in production, stops it naming the
// flag.
func (f *Flags) OptsFor(m *config.Mode) ([]kgo.Opt, error) {
	opts, err := f.Opts() // Validate's checks, the files read once
	if err != nil {
		return nil, err
	}
	if err := f.requireFor(m); err != nil {
		return nil, err
	}
	return opts, nil
}

// Opts validates the flags and returns the client options they ask for:
// none for the zero value.
func (f *Flags) Opts() ([]kgo.Opt, error) {
	mech, err := f.mechanism()
	if err != nil {
		return nil, err
	}
	if mech != nil && !f.tls() && !f.AllowPlaintextSASL {
		return nil, fmt.Errorf("--kafka-sasl-mechanism %s without TLS: set --kafka-tls or --kafka-ca-file (or, for a local broker, --kafka-allow-plaintext-sasl)", f.Mechanism)
	}
	var opts []kgo.Opt
	cfg, err := f.TLSConfig()
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// mechanism checks the SASL flags and reads the password; nil when SASL
// is off.
func (f *Flags) mechanism() (sasl.Mechanism, error) {
	switch f.Mechanism {
	case "":
		if f.Username != "" {
			return nil, errors.New("--kafka-username needs --kafka-sasl-mechanism")
		}
		if f.PasswordFile != "" {
			return nil, errors.New("--kafka-password-file needs --kafka-sasl-mechanism")
		}
		return nil, nil
	case ScramSHA256, ScramSHA512, Plain:
	default:
		return nil, fmt.Errorf("--kafka-sasl-mechanism %q: want %s, %s or %s (or empty: no SASL)", f.Mechanism, ScramSHA256, ScramSHA512, Plain)
	}
	if f.Username == "" {
		return nil, fmt.Errorf("--kafka-sasl-mechanism %s needs --kafka-username", f.Mechanism)
	}
	if f.PasswordFile == "" {
		return nil, fmt.Errorf("--kafka-sasl-mechanism %s needs --kafka-password-file", f.Mechanism)
	}
	pass, err := config.ReadSecret(f.PasswordFile)
	if err != nil {
		return nil, fmt.Errorf("--kafka-password-file: %w", err)
	}
	switch f.Mechanism {
	case ScramSHA256:
		return scram.Auth{User: f.Username, Pass: pass}.AsSha256Mechanism(), nil
	case ScramSHA512:
		return scram.Auth{User: f.Username, Pass: pass}.AsSha512Mechanism(), nil
	}
	return plain.Auth{User: f.Username, Pass: pass}.AsMechanism(), nil
}

// TLSConfig is the client's TLS configuration; nil without TLS. An empty
// ServerName is left so: franz-go then checks each broker's own host.
func (f *Flags) TLSConfig() (*tls.Config, error) {
	if !f.tls() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pool, err := config.ReadCertPool(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-ca-file: %w", err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile == "":
		return nil, errors.New("--kafka-cert-file needs --kafka-key-file")
	case f.KeyFile != "" && f.CertFile == "":
		return nil, errors.New("--kafka-key-file needs --kafka-cert-file")
	case f.CertFile != "":
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			// LoadX509KeyPair names the files and the PEM problem, never
			// the key's bytes.
			return nil, fmt.Errorf("--kafka-cert-file/--kafka-key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Client is a Kafka client's flags: the seed brokers and how to reach
// them.
type Client struct {
	*Flags
	brokers *string
}

// RegisterClient adds --kafka-brokers and the security flags to fs.
func RegisterClient(fs *flag.FlagSet) *Client {
	b := fs.String("kafka-brokers", "127.0.0.1:9092", "Kafka seed brokers, comma separated")
	return &Client{Flags: Register(fs), brokers: b}
}

// Brokers are the seed brokers.
func (c *Client) Brokers() []string { return strings.Split(*c.brokers, ",") }
