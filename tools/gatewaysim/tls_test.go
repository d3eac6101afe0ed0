package gatewaysim_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/devtls"
	"github.com/paysched/paysched/pkg/platform/mtls"
	"github.com/paysched/paysched/tools/gatewaysim"
)

// TestMutualTLSAndTokenRefuseStrangers serves gateway-sim with mutual TLS
// and a bearer token, as the local stack and chaos do, and charges through
// the engine's own dial path: only a client that trusts the CA, presents a
// certificate of an admitted service and carries the token is answered,
// and no refused call leaves a charge behind.
func TestMutualTLSAndTokenRefuseStrangers(t *testing.T) {
	dir := t.TempDir()
	files, err := devtls.Prepare(dir, "gateway-sim", []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	client := func(name string) (cert, key string) {
		f, err := devtls.Prepare(dir, name, []string{name})
		if err != nil {
			t.Fatal(err)
		}
		return f.CertFile, f.KeyFile
	}
	execCert, execKey := client("executor")
	sweepCert, sweepKey := client("sweeper")
	// Another CA, for a client that trusts the wrong root, and for an
	// "executor" certificate the gateway's CA never signed.
	other, err := devtls.Prepare(filepath.Join(dir, "other"), "executor", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	wrongToken := filepath.Join(dir, "wrong-token")
	if err := os.WriteFile(wrongToken, []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sim := gatewaysim.New(gatewaysim.NewMemLedger(), nil)
	srvTLS := &mtls.Server{CertFile: files.CertFile, KeyFile: files.KeyFile, ClientCAFile: files.CAFile,
		Allowed: strings.Split(gatewaysim.DefaultClients, ",")}
	opts, err := gatewaysim.ServerOptions(srvTLS, files.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
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
		// refused: the gateway answered UNAUTHENTICATED or
		// PERMISSION_DENIED, so the engine knows nothing was charged (a
		// failed handshake instead reads as a transport error: ambiguous,
		// probed later).
		refused bool
	}{
		{"plaintext", dial.Flags{}, false, false},
		{"another CA", dial.Flags{CAFile: other.CAFile, CertFile: execCert, KeyFile: execKey, TokenFile: files.TokenFile}, false, false},
		{"CA and token, no certificate", dial.Flags{CAFile: files.CAFile, TokenFile: files.TokenFile}, false, false},
		{"a certificate of another CA", dial.Flags{CAFile: files.CAFile, CertFile: other.CertFile, KeyFile: other.KeyFile, TokenFile: files.TokenFile}, false, false},
		{"a sweeper's certificate", dial.Flags{CAFile: files.CAFile, CertFile: sweepCert, KeyFile: sweepKey, TokenFile: files.TokenFile}, false, true},
		{"certificate, no token", dial.Flags{CAFile: files.CAFile, CertFile: execCert, KeyFile: execKey}, false, true},
		{"certificate, wrong token", dial.Flags{CAFile: files.CAFile, CertFile: execCert, KeyFile: execKey, TokenFile: wrongToken}, false, true},
		{"an executor's certificate and the token", dial.Flags{CAFile: files.CAFile, CertFile: execCert, KeyFile: execKey, TokenFile: files.TokenFile}, true, false},
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
			r := c.Charge(ctx, gateway.ChargeInput{ID: "pay-" + tc.name, Payer: "alice", Payee: "bob", Currency: "USD", Amount: 100})
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
		t.Fatalf("%d charges recorded, want 1 (only the admitted client with the token)", rep.GetCharges())
	}
}

// TestProductionGatewayIsMutualTLS: outside --dev the services refuse a
// gateway.v1 hop that is plaintext or presents no client certificate.
func TestProductionGatewayIsMutualTLS(t *testing.T) {
	prod, dev := &config.Mode{}, &config.Mode{Dev: true}
	dir := t.TempDir()
	key := func(name, value string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	live := key("live", "rk_live_"+strings.Repeat("x", 24))
	test := key("test", "sk_test_"+strings.Repeat("x", 24))
	junk := key("junk", "not-a-stripe-key")
	for _, tc := range []struct {
		name  string
		flags dial.Flags
		ok    bool
	}{
		{"plaintext", dial.Flags{}, false},
		{"server TLS only", dial.Flags{CAFile: "ca.pem", TokenFile: "token"}, false},
		{"mutual TLS", dial.Flags{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem"}, true},
		{"stripe over http", dial.Flags{Kind: dial.KindStripe, StripeKeyFile: live, StripeURL: "http://127.0.0.1:12111"}, false},
		{"stripe over https", dial.Flags{Kind: dial.KindStripe, StripeKeyFile: live, StripeURL: "https://api.stripe.com"}, true},
		{"stripe test key", dial.Flags{Kind: dial.KindStripe, StripeKeyFile: test, StripeURL: "https://api.stripe.com"}, false},
		{"stripe test key in test mode", dial.Flags{Kind: dial.KindStripe, StripeKeyFile: test, StripeURL: "https://api.stripe.com", StripeTestMode: true}, true},
	} {
		f := tc.flags
		if f.Kind == "" {
			f.Kind, f.Addr = dial.KindGRPC, "gw:443"
		}
		err := f.ValidateFor(prod)
		if (err == nil) != tc.ok {
			t.Errorf("%s in production: %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--") {
			t.Errorf("%s: %q names no flag", tc.name, err)
		}
		if err := f.ValidateFor(dev); err != nil {
			t.Errorf("%s in development: %v", tc.name, err)
		}
	}
	// Not a Stripe key at all is refused in development too: it would
	// only fail later, at the first charge.
	f := dial.Flags{Kind: dial.KindStripe, StripeKeyFile: junk, StripeURL: "http://127.0.0.1:12111"}
	if err := f.ValidateFor(dev); err == nil {
		t.Error("a file holding no Stripe key was accepted")
	}
}

// TestBearerNeedsTLS: the dial path never sends a token in the clear.
func TestBearerNeedsTLS(t *testing.T) {
	f := dial.Flags{Kind: dial.KindGRPC, Addr: "127.0.0.1:1", TokenFile: "/dev/null"}
	if err := f.Validate(); err == nil {
		t.Fatal("a token without TLS was accepted")
	}
}

// TestGatewayAuthorizesPerMethod: gateway-sim admits each client
// certificate to its own methods only. Only the executor charges; the
// reconciler and admin-api read and cancel; payments-api is no client at
// all. The table is written out here, not read from MethodClients, so a
// change to who may charge fails this test.
func TestGatewayAuthorizesPerMethod(t *testing.T) {
	dir := t.TempDir()
	files, err := devtls.Prepare(dir, "gateway-sim", []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	sim := gatewaysim.New(gatewaysim.NewMemLedger(), nil)
	srvTLS := &mtls.Server{CertFile: files.CertFile, KeyFile: files.KeyFile, ClientCAFile: files.CAFile,
		Allowed: strings.Split(gatewaysim.DefaultClients, ",")}
	opts, err := gatewaysim.ServerOptions(srvTLS, "")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	gatewayv1.RegisterGatewayServiceServer(gs, sim)
	gatewayv1.RegisterGatewayAdminServiceServer(gs, sim)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	type call func(ctx context.Context, cc *grpc.ClientConn) error
	gw := func(cc *grpc.ClientConn) gatewayv1.GatewayServiceClient { return gatewayv1.NewGatewayServiceClient(cc) }
	n := 0
	calls := map[string]call{
		"Charge": func(ctx context.Context, cc *grpc.ClientConn) error {
			n++
			_, err := gw(cc).Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: fmt.Sprint("per-method-", n), Payer: "alice", Payee: "bob",
				Amount: 100, Currency: "USD"})
			return err
		},
		"GetCharge": func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := gw(cc).GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: "nobody"})
			if status.Code(err) == codes.NotFound {
				return nil // answered: absent
			}
			return err
		},
		"CancelCharge": func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := gw(cc).CancelCharge(ctx, &gatewayv1.CancelChargeRequest{IdempotencyKey: "nobody"})
			if c := status.Code(err); c == codes.NotFound || c == codes.FailedPrecondition {
				return nil // answered
			}
			return err
		},
		"ListSettlements": func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := gw(cc).ListSettlements(ctx, &gatewayv1.ListSettlementsRequest{Day: "2026-01-01"})
			return err
		},
		"Report": func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := gatewayv1.NewGatewayAdminServiceClient(cc).Report(ctx, &gatewayv1.ReportRequest{})
			return err
		},
	}
	allowed := map[string][]string{
		"executor":     {"Charge", "GetCharge", "CancelCharge"},
		"reconciler":   {"GetCharge", "CancelCharge", "ListSettlements"},
		"admin-api":    {"GetCharge", "CancelCharge", "ListSettlements"},
		"operator":     {"GetCharge", "ListSettlements", "Report"},
		"payments-api": nil,
		"sweeper":      nil,
	}
	for client, may := range allowed {
		f, err := devtls.Prepare(dir, client, []string{client})
		if err != nil {
			t.Fatal(err)
		}
		dopt, err := (&mtls.Client{CAFile: files.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile, ServerName: "localhost"}).DialOption()
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(lis.Addr().String(), dopt)
		if err != nil {
			t.Fatal(err)
		}
		for method, do := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := do(ctx, cc)
			cancel()
			want := slices.Contains(may, method)
			switch {
			case want && err != nil:
				t.Errorf("%s %s: %v, want an answer", client, method, err)
			case !want && status.Code(err) != codes.PermissionDenied:
				t.Errorf("%s %s: %v, want PERMISSION_DENIED", client, method, err)
			}
		}
		cc.Close()
	}
	rep, err := sim.Report(context.Background(), &gatewayv1.ReportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetCharges() != 1 {
		t.Errorf("%d charges recorded, want 1 (the executor's)", rep.GetCharges())
	}
}
