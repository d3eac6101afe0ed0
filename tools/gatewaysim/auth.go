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
// the demo and chaos (report, faults). payments-api is not one: it holds
// no gateway access.
const DefaultClients = "executor,reconciler,admin-api,operator"

// MethodClients is who may call what, whatever else admits them: only the
// executor charges; the reconciler and admin-api read charges and
// settlements and cancel undecided charges (which can only stop money,
// never move it); the operator's tools read charges and drive gateway-sim.
// A real PSP adapter should enforce the same (docs/GATEWAYS.md).
var MethodClients = map[string][]string{
	"/gateway.v1.GatewayService/Charge":          {"executor"},
	"/gateway.v1.GatewayService/Charges":         {"executor"},
	"/gateway.v1.GatewayService/GetCharge":       {"executor", "reconciler", "admin-api", "operator"},
	"/gateway.v1.GatewayService/CancelCharge":    {"executor", "reconciler", "admin-api"},
	"/gateway.v1.GatewayService/ListSettlements": {"reconciler", "admin-api", "operator"},
	"/gateway.v1.GatewayAdminService/*":          {"operator"},
}

// ServerOptions are gateway-sim's transport security, as a real PSP
// adapter would have it: mutual TLS admitting only the named services
// (PERMISSION_DENIED for any other certificate of the CA), each only to
// its methods (MethodClients), and, when tokenFile is set, a bearer token
// on every call as well.
func ServerOptions(tlsServer *mtls.Server, tokenFile string) ([]grpc.ServerOption, error) {
	opts, err := tlsServer.Options()
	if err != nil {
		return nil, err
	}
	if tlsServer.On() {
		opts = append(opts, mtls.ByMethod(MethodClients)...)
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
