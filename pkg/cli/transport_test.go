package cli_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/cli"
	"github.com/paysched/paysched/pkg/platform/devtls"
)

// seen is a PaymentsService that records the bearer token of each call.
type seen struct {
	payschedv1.UnimplementedPaymentsServiceServer
	tokens chan string
}

func (s *seen) GetScheduledPayment(ctx context.Context, _ *payschedv1.GetScheduledPaymentRequest) (*payschedv1.GetScheduledPaymentResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.tokens <- strings.Join(md.Get("authorization"), ",")
	return &payschedv1.GetScheduledPaymentResponse{Payment: &payschedv1.ScheduledPayment{PaymentId: "p"}}, nil
}

func payctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.New()
	var out bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	err := root.Execute()
	return out.String(), err
}

// TestTokensTravelOnlyOverTLS: payctl speaks TLS to an API given
// --ca-file (and sends the --token-file's token over it), and refuses to
// send a token in plaintext to an address that is not this host.
func TestTokensTravelOnlyOverTLS(t *testing.T) {
	dir := t.TempDir()
	files, err := devtls.Prepare(dir, "payments-api", []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := &seen{tokens: make(chan string, 1)}
	gs := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	payschedv1.RegisterPaymentsServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := payctl(t, "--api", lis.Addr().String(), "--ca-file", files.CAFile, "--token-file", tokenFile, "get", "p"); err != nil {
		t.Fatalf("over TLS: %v", err)
	}
	if got := <-srv.tokens; got != "Bearer the-token" {
		t.Fatalf("the API got %q, want the token file's token", got)
	}
	// Without --ca-file, plaintext: refused before dialing for a remote
	// address, whichever way the token comes.
	for _, args := range [][]string{
		{"--api", "203.0.113.7:9090", "--token", "t", "get", "p"},
		{"--api", "api.example.com:443", "--token-file", tokenFile, "get", "p"},
		{"--api", "203.0.113.7:9090", "get", "p"}, // a minted token
		{"--admin-api", "203.0.113.7:9091", "dead-letters"},
	} {
		if _, err := payctl(t, args...); err == nil || !strings.Contains(err.Error(), "--ca-file") {
			t.Errorf("payctl %v: %v, want a refusal naming --ca-file", args, err)
		}
	}
}

// TestMintedTokensAreShortLived: `payctl token` mints 15-minute tokens by
// default, inside the APIs' one-hour cap.
func TestMintedTokensAreShortLived(t *testing.T) {
	for _, admin := range []bool{false, true} {
		args := []string{"--jwt-secret", "s", "token"}
		if admin {
			args = append(args, "--admin")
		}
		out, err := payctl(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(strings.TrimSpace(out), ".")
		if len(parts) != 3 {
			t.Fatalf("not a JWT: %q", out)
		}
		b, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		var claims struct{ Iat, Exp int64 }
		if err := json.Unmarshal(b, &claims); err != nil {
			t.Fatal(err)
		}
		if life := time.Duration(claims.Exp-claims.Iat) * time.Second; life <= 0 || life > 15*time.Minute {
			t.Errorf("admin=%v: a token living %s", admin, life)
		}
	}
}
