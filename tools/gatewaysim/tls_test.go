package gatewaysim_test

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/devtls"
	"github.com/paysched/paysched/tools/gatewaysim"
)

// TestTLSAndTokenRefuseStrangers serves gateway-sim over TLS with a bearer
// token, as the local stack and chaos do, and charges through the engine's
// own dial path: only a client with the CA and the token is answered, and
// no refused call leaves a charge behind.
func TestTLSAndTokenRefuseStrangers(t *testing.T) {
	dir := t.TempDir()
	files, err := devtls.Prepare(dir, "gateway-sim", []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	// Another CA, for a client that trusts the wrong root.
	other, err := devtls.Prepare(filepath.Join(dir, "other"), "x", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	wrongToken := filepath.Join(dir, "wrong-token")
	if err := os.WriteFile(wrongToken, []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := config.ReadSecret(files.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	sim := gatewaysim.New(gatewaysim.NewMemLedger(), nil)
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewServerTLSFromCert(&cert))}, gatewaysim.RequireBearer(tok)...)
	gs := grpc.NewServer(opts...)
	gatewayv1.RegisterGatewayServiceServer(gs, sim)
	gatewayv1.RegisterGatewayAdminServiceServer(gs, sim)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	addr := lis.Addr().String()

	for _, tc := range []struct {
		name  string
		flags dial.Flags
		ok    bool
		// refused: the gateway answered UNAUTHENTICATED, so the engine
		// knows nothing was charged (a failed handshake instead reads as
		// a transport error: ambiguous, probed later).
		refused bool
	}{
		{"plaintext", dial.Flags{}, false, false},
		{"another CA", dial.Flags{CAFile: other.CAFile, TokenFile: files.TokenFile}, false, false},
		{"CA, no token", dial.Flags{CAFile: files.CAFile}, false, true},
		{"CA, wrong token", dial.Flags{CAFile: files.CAFile, TokenFile: wrongToken}, false, true},
		{"CA and token", dial.Flags{CAFile: files.CAFile, TokenFile: files.TokenFile}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.flags
			f.Kind, f.Addr = dial.KindGRPC, addr
			gw, err := f.Open(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			c := &gateway.Charger{Gateway: gw, ChargeTimeout: 2 * time.Second, ProbeTimeout: time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r := c.Charge(ctx, gateway.Payment{ID: "pay-" + tc.name, Payer: "alice", Payee: "bob", Currency: "USD", Amount: 100})
			if tc.ok {
				if r.Outcome != payment.Succeeded {
					t.Fatalf("outcome %v (%s), want SUCCEEDED", r.Outcome, r.Error)
				}
				return
			}
			if r.Outcome == payment.Succeeded || r.Found {
				t.Fatalf("a refused client was answered: %+v", r)
			}
			if tc.refused && (r.Outcome != payment.Retryable || r.Uncertain) {
				t.Fatalf("a refusal read as %v uncertain=%v (%s), want RETRYABLE and certain", r.Outcome, r.Uncertain, r.Error)
			}
			t.Logf("refused: %s", r.Error)
		})
	}
	rep, err := sim.Report(context.Background(), &gatewayv1.ReportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetCharges() != 1 {
		t.Fatalf("%d charges recorded, want 1 (only the client with the CA and the token)", rep.GetCharges())
	}
}

// TestBearerNeedsTLS: the dial path never sends a token in the clear.
func TestBearerNeedsTLS(t *testing.T) {
	f := dial.Flags{Kind: dial.KindGRPC, Addr: "127.0.0.1:1", TokenFile: "/dev/null"}
	if err := f.Validate(); err == nil {
		t.Fatal("a token without TLS was accepted")
	}
}
