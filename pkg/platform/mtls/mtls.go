// Package mtls is mutual TLS for paysched's internal gRPC hops: a server
// that serves its certificate, requires a client certificate from one CA
// and admits only the client names it is told (an executor: only sweepers
// may ask it to charge), and the client side that presents its own. The
// flags are the same in every service that uses them; the files come from
// the cluster's issuer (cert-manager) or, locally, from pkg/platform/devtls.
package mtls

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/paysched/paysched/pkg/platform/config"
)

// Server is a gRPC server's mutual TLS: off when CertFile is empty.
type Server struct {
	CertFile, KeyFile, ClientCAFile string
	// Allowed are the client certificate common names admitted.
	Allowed []string
}

// RegisterServer adds --tls-cert-file, --tls-key-file, --tls-client-ca-file
// and --tls-allowed-clients (default allowed) to fs.
func RegisterServer(fs *flag.FlagSet, allowed string) *Server {
	s := &Server{}
	fs.StringVar(&s.CertFile, "tls-cert-file", "", "PEM certificate to serve gRPC with mutual TLS (with --tls-key-file and --tls-client-ca-file); plaintext when empty")
	fs.StringVar(&s.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&s.ClientCAFile, "tls-client-ca-file", "", "PEM CA bundle client certificates must chain to")
	fs.Func("tls-allowed-clients", "comma-separated client certificate names admitted (default "+allowed+")", func(v string) error {
		s.Allowed = split(v)
		return nil
	})
	s.Allowed = split(allowed)
	return s
}

func split(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// On reports whether the server serves mutual TLS.
func (s *Server) On() bool { return s.CertFile != "" }

// Validate names the flag of a configuration that cannot work.
func (s *Server) Validate() error {
	if s.CertFile == "" && s.KeyFile == "" && s.ClientCAFile == "" {
		return nil
	}
	switch {
	case s.CertFile == "" || s.KeyFile == "":
		return errors.New("--tls-cert-file and --tls-key-file go together")
	case s.ClientCAFile == "":
		return errors.New("--tls-cert-file needs --tls-client-ca-file: an internal server admits only clients it can verify")
	case len(s.Allowed) == 0:
		return errors.New("--tls-allowed-clients must name at least one client")
	}
	return nil
}

// Options are the server options: credentials that require a verified
// client certificate, and interceptors that refuse (PERMISSION_DENIED,
// before any handler runs) a client whose certificate names no allowed
// client. Nil when mutual TLS is off.
func (s *Server) Options() ([]grpc.ServerOption, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file: %w", err)
	}
	pool, err := config.ReadCertPool(s.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-client-ca-file: %w", err)
	}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	admit := func(ctx context.Context) error {
		if name := ClientName(ctx); !slices.Contains(s.Allowed, name) {
			return status.Errorf(codes.PermissionDenied, "client %q may not call this service", name)
		}
		return nil
	}
	return append([]grpc.ServerOption{grpc.Creds(creds)}, Gate(admit)...), nil
}

// Gate returns server options that run check before every unary and
// stream handler and answer its error instead: a refused call reaches no
// handler.
func Gate(check func(context.Context) error) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// ByMethod returns server options that refuse (PERMISSION_DENIED, before
// any handler) a call to a method of rules whose client certificate's
// name is not listed for it. A rule keyed "/pkg.Service/*" covers the
// whole service; a method no rule names is left to the other checks.
// Mutual TLS must be on: without a certificate the name is empty.
func ByMethod(rules map[string][]string) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := allowedFor(ctx, rules, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := allowedFor(ss.Context(), rules, info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

func allowedFor(ctx context.Context, rules map[string][]string, method string) error {
	who, ok := rules[method]
	if !ok {
		if i := strings.LastIndex(method, "/"); i > 0 {
			who, ok = rules[method[:i]+"/*"]
		}
	}
	if !ok {
		return nil
	}
	if name := ClientName(ctx); !slices.Contains(who, name) {
		return status.Errorf(codes.PermissionDenied, "client %q may not call %s", name, method)
	}
	return nil
}

// ClientName is the common name of the verified client certificate.
func ClientName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return ti.State.VerifiedChains[0][0].Subject.CommonName
}

// Client is the client side: off when CAFile is empty.
type Client struct {
	CAFile, CertFile, KeyFile, ServerName string
}

// RegisterClient adds --<peer>-ca-file, --<peer>-cert-file, --<peer>-key-file
// and --<peer>-server-name to fs, for calls to peer (e.g. "executor").
func RegisterClient(fs *flag.FlagSet, peer string) *Client {
	c := &Client{}
	fs.StringVar(&c.CAFile, peer+"-ca-file", "", "PEM CA bundle the "+peer+"s' certificates must chain to; set, calls use mutual TLS (plaintext when empty)")
	fs.StringVar(&c.CertFile, peer+"-cert-file", "", "PEM client certificate presented to the "+peer+"s")
	fs.StringVar(&c.KeyFile, peer+"-key-file", "", "PEM private key of --"+peer+"-cert-file")
	fs.StringVar(&c.ServerName, peer+"-server-name", "", "name the "+peer+"s' certificates must carry (default: the host dialed)")
	return c
}

// On reports whether calls use mutual TLS.
func (c *Client) On() bool { return c.CAFile != "" }

// Validate names the flag of a configuration that cannot work.
func (c *Client) Validate() error {
	if c.CAFile == "" && c.CertFile == "" && c.KeyFile == "" {
		return nil
	}
	if c.CAFile == "" || c.CertFile == "" || c.KeyFile == "" {
		return errors.New("mutual TLS needs the CA, the certificate and the key files together")
	}
	return nil
}

// DialOption is the transport for the peer: mutual TLS, or plaintext when
// off.
func (c *Client) DialOption() (grpc.DialOption, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.CAFile == "" {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	pool, err := config.ReadCertPool(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert},
		ServerName: c.ServerName, MinVersion: tls.VersionTLS12})), nil
}
