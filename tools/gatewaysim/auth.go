package gatewaysim

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/mtls"
)

// DefaultClients are the client certificate names gateway-sim admits: the
// services that charge, probe and reconcile, and "operator" for payctl,
// the demo and chaos (report, faults).
const DefaultClients = "executor,reconciler,payments-api,operator"

// ServerOptions are gateway-sim's transport security, as a real PSP
// adapter would have it: mutual TLS admitting only the named services
// (PERMISSION_DENIED for any other certificate of the CA), and, when
// tokenFile is set, a bearer token on every call as well.
func ServerOptions(tlsServer *mtls.Server, tokenFile string) ([]grpc.ServerOption, error) {
	opts, err := tlsServer.Options()
	if err != nil {
		return nil, err
	}
	if tokenFile == "" {
		return opts, nil
	}
	if !tlsServer.On() {
		return nil, errors.New("--token-file needs --tls-cert-file: a bearer token is never taken in the clear")
	}
	tok, err := config.ReadSecret(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	return append(opts, RequireBearer(tok)...), nil
}

// RequireBearer returns server options that refuse every call whose
// "authorization" metadata is not "Bearer <token>", before the call reaches
// the ledger: a refused charge is never recorded.
func RequireBearer(token string) []grpc.ServerOption {
	want := []byte("Bearer " + token)
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		for _, v := range md.Get("authorization") {
			if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(v)), want) == 1 {
				return nil
			}
		}
		return status.Error(codes.Unauthenticated, "missing or wrong bearer token")
	}
	return mtls.Gate(check)
}
