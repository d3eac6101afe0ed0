// Package dial opens the gateway a service is configured for, from the same
// flags in every service: gateway.v1 over gRPC (gateway-sim or a custom PSP
// adapter) with TLS and a per-call bearer token, or Stripe over HTTPS.
// Secrets are read from files and never logged.
package dial

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/platform/config"
)

// Kinds of gateway.
const (
	KindGRPC   = "grpc"
	KindStripe = "stripe"
)

// Flags say which gateway to open and how.
type Flags struct {
	Kind       string
	Addr       string
	CAFile     string
	ServerName string
	TokenFile  string
	// CertFile and KeyFile are the client certificate presented to the
	// gateway: mutual TLS, the gateway knows which service calls.
	CertFile, KeyFile string
	// Stripe.
	StripeKeyFile string
	StripeURL     string
	// StripeTestMode lets production run on a test key (sk_test_, rk_test_).
	StripeTestMode bool
	// Linger is how long a charge waits for others to share its message on
	// the gateway.v1 Charges stream (gateway.GRPC.Linger).
	Linger time.Duration
	// MaxRequest is the gateway's longest request (gateway.Charger.MaxRequest);
	// 0: the kind's default (MaxRequestTime).
	MaxRequest time.Duration
}

// The gateways' longest requests by default: how long after its request a
// charge may still be made, its client gone or not.
const (
	// DefaultMaxRequestGRPC is gateway.v1's contract (GATEWAYS.md): an
	// implementation makes a charge within a minute of its request, or
	// never.
	DefaultMaxRequestGRPC = time.Minute
	// DefaultMaxRequestStripe is Stripe's own client libraries' timeout
	// (80 s), the wide end of the funnel of timeouts inside Stripe: a
	// create still running there after it is past every one of them.
	DefaultMaxRequestStripe = 80 * time.Second
)

// Register adds the gateway flags to fs. defaultAddr is the gateway.v1
// address used when --gateway-addr is not given.
func Register(fs *flag.FlagSet, defaultAddr string) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Kind, "gateway", KindGRPC, "gateway implementation: grpc (gateway.v1: gateway-sim or a PSP adapter) or stripe")
	fs.StringVar(&f.Addr, "gateway-addr", defaultAddr, "gateway.v1 address, host:port (--gateway=grpc)")
	fs.StringVar(&f.CAFile, "gateway-ca-file", "", "PEM CA bundle the gateway's certificate must chain to; set, the connection uses TLS (--gateway=grpc)")
	fs.StringVar(&f.ServerName, "gateway-server-name", "", "name the gateway's certificate must carry (default: the host of --gateway-addr)")
	fs.StringVar(&f.CertFile, "gateway-cert-file", "", "PEM client certificate presented to the gateway, for mutual TLS (with --gateway-key-file; needs --gateway-ca-file) (--gateway=grpc)")
	fs.StringVar(&f.KeyFile, "gateway-key-file", "", "PEM private key of --gateway-cert-file")
	fs.StringVar(&f.TokenFile, "gateway-token-file", "", "file holding the bearer token sent with every gateway call; needs --gateway-ca-file (--gateway=grpc)")
	fs.StringVar(&f.StripeKeyFile, "stripe-key-file", "", "file holding the Stripe secret key (--gateway=stripe)")
	fs.StringVar(&f.StripeURL, "stripe-api-url", "https://api.stripe.com", "Stripe API base URL; stripe-mock's for local runs (--gateway=stripe)")
	fs.DurationVar(&f.Linger, "gateway-linger", 2*time.Millisecond, "how long a charge waits for others to share its message on the gateway.v1 Charges stream (0-100ms; --gateway=grpc)")
	fs.DurationVar(&f.MaxRequest, "gateway-max-request", 0, "the gateway's longest request: how long after a request it may still make the charge, its client gone or not; a proven absence counts only once the payment's last request is older (0: the gateway's default: 1m for gateway.v1, 80s for Stripe)")
	fs.BoolVar(&f.StripeTestMode, "stripe-test-mode", false, "accept a Stripe test key (sk_test_, rk_test_) outside --dev: a staging deployment against Stripe's test mode")
	return f
}

// Validate reports a configuration that cannot work, naming the flag.
func (f *Flags) Validate() error {
	switch f.Kind {
	case KindGRPC:
		if f.Addr == "" {
			return errors.New("--gateway-addr must not be empty")
		}
		if _, _, err := net.SplitHostPort(f.Addr); err != nil {
			return fmt.Errorf("--gateway-addr %q: want host:port", f.Addr)
		}
		if f.TokenFile != "" && f.CAFile == "" {
			return errors.New("--gateway-token-file needs --gateway-ca-file: a bearer token is never sent in the clear")
		}
		if (f.CertFile == "") != (f.KeyFile == "") {
			return errors.New("--gateway-cert-file and --gateway-key-file go together")
		}
		if f.CertFile != "" && f.CAFile == "" {
			return errors.New("--gateway-cert-file needs --gateway-ca-file: mutual TLS verifies the gateway too")
		}
		if f.Linger < 0 || f.Linger > 100*time.Millisecond {
			return fmt.Errorf("--gateway-linger must be between 0 and 100ms, got %s", f.Linger)
		}
	case KindStripe:
		if f.StripeKeyFile == "" {
			return errors.New("--gateway=stripe needs --stripe-key-file")
		}
		u, err := url.Parse(f.StripeURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("--stripe-api-url %q: want an http(s) URL", f.StripeURL)
		}
	default:
		return fmt.Errorf("--gateway %q: want %s or %s", f.Kind, KindGRPC, KindStripe)
	}
	if f.MaxRequest < 0 || f.MaxRequest > time.Hour {
		return fmt.Errorf("--gateway-max-request must be between 0 (the gateway's default) and 1h, got %s", f.MaxRequest)
	}
	return nil
}

// MaxRequestTime is the gateway's longest request: --gateway-max-request,
// or its kind's default.
func (f *Flags) MaxRequestTime() time.Duration {
	switch {
	case f.MaxRequest > 0:
		return f.MaxRequest
	case f.Kind == KindStripe:
		return DefaultMaxRequestStripe
	}
	return DefaultMaxRequestGRPC
}

// ValidateFor is Validate plus the mode's rules: outside development a
// gateway.v1 hop is mutual TLS (the gateway's certificate checked against
// --gateway-ca-file, ours presented from --gateway-cert-file), and Stripe
// is reached over HTTPS.
func (f *Flags) ValidateFor(m *config.Mode) error {
	if err := f.Validate(); err != nil {
		return err
	}
	switch f.Kind {
	case KindGRPC:
		if err := m.Require(f.CAFile != "" && f.CertFile != "",
			errors.New("the gateway hop is plaintext or one-sided: production needs --gateway-ca-file, --gateway-cert-file and --gateway-key-file (mutual TLS)")); err != nil {
			return err
		}
		if f.TokenFile != "" && !m.Dev {
			tok, err := config.ReadSecret(f.TokenFile)
			if err != nil {
				return fmt.Errorf("--gateway-token-file: %w", err)
			}
			return config.CheckSecret("--gateway-token-file", tok)
		}
	case KindStripe:
		u, _ := url.Parse(f.StripeURL)
		if err := m.Require(u.Scheme == "https", fmt.Errorf("--stripe-api-url %q is not HTTPS: production sends the secret key only over TLS", f.StripeURL)); err != nil {
			return err
		}
		key, err := config.ReadSecret(f.StripeKeyFile)
		if err != nil {
			return fmt.Errorf("--stripe-key-file: %w", err)
		}
		live := strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")
		test := strings.HasPrefix(key, "sk_test_") || strings.HasPrefix(key, "rk_test_")
		switch {
		case !live && !test:
			return errors.New("--stripe-key-file does not hold a Stripe secret or restricted key (sk_... or rk_...)")
		case test && !m.Dev && !f.StripeTestMode:
			return errors.New("--stripe-key-file holds a Stripe test key: production charges with a live key (sk_live_ or rk_live_), or set --stripe-test-mode for a staging run on Stripe's test mode (or --dev)")
		}
	}
	return nil
}

// StripeLive reports whether the Stripe key moves real money (sk_live_,
// rk_live_): the livemode Stripe's events about our charges carry.
func (f *Flags) StripeLive() (bool, error) {
	key, err := config.ReadSecret(f.StripeKeyFile)
	if err != nil {
		return false, fmt.Errorf("--stripe-key-file: %w", err)
	}
	return strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_"), nil
}

// Gateway is an open gateway; Close releases its connections. It tells
// its clock (gateway.CheckClock).
type Gateway interface {
	gateway.Gateway
	gateway.Clocked
	Close()
}

// Open validates f and opens the gateway. extra dial options (tracing,
// reconnect tuning) apply to the gRPC kind.
func (f *Flags) Open(ctx context.Context, extra ...grpc.DialOption) (Gateway, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	switch f.Kind {
	case KindStripe:
		return openStripe(f)
	}
	cc, err := f.DialGRPC(extra...)
	if err != nil {
		return nil, err
	}
	g := gateway.NewGRPC(cc)
	g.Linger = f.Linger
	return &grpcGateway{GRPC: g, cc: cc}, nil
}

type grpcGateway struct {
	*gateway.GRPC
	cc *grpc.ClientConn
}

func (g *grpcGateway) Close() {
	g.GRPC.Close()
	g.cc.Close()
}

// DialGRPC opens the gRPC connection to --gateway-addr with the TLS and
// token the flags give: for the engine's stream and for tools that call
// gateway-sim's admin service.
func (f *Flags) DialGRPC(extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	creds, err := f.transport()
	if err != nil {
		return nil, err
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, extra...)
	if f.TokenFile != "" {
		tok, err := config.ReadSecret(f.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--gateway-token-file: %w", err)
		}
		opts = append(opts, grpc.WithPerRPCCredentials(Bearer(tok)))
	}
	cc, err := grpc.NewClient(f.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway client: %w", err)
	}
	return cc, nil
}

func (f *Flags) transport() (credentials.TransportCredentials, error) {
	if f.CAFile == "" {
		return insecure.NewCredentials(), nil
	}
	pool, err := config.ReadCertPool(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("--gateway-ca-file: %w", err)
	}
	name := f.ServerName
	if name == "" {
		name, _, _ = net.SplitHostPort(f.Addr)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--gateway-cert-file/--gateway-key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// Bearer is a per-call credential: "authorization: Bearer <token>". It
// requires a secure transport, so grpc never sends it in the clear.
type Bearer string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (Bearer) RequireTransportSecurity() bool { return true }

// String keeps the token out of logs and fmt output.
func (Bearer) String() string { return "Bearer <redacted>" }
