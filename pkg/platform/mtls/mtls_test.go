package mtls_test

import (
	"context"
	"flag"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/platform/devtls"
	"github.com/paysched/paysched/pkg/platform/mtls"
)

// executor counts the batches that reached it: none may, but a sweeper's.
type executor struct {
	internalv1.UnimplementedExecutorServiceServer
	batches atomic.Int32
}

func (e *executor) Execute(*internalv1.ExecuteRequest, grpc.ServerStreamingServer[internalv1.ExecuteResponse]) error {
	e.batches.Add(1)
	return nil
}

// TestExecutorAdmitsOnlySweepers: with the executor's flags, an executor
// serves mutual TLS and runs Execute only for a client whose certificate is
// a sweeper's: another service's certificate from the same CA, a
// certificate from another CA, no certificate, and plaintext are refused
// before any batch reaches it.
func TestExecutorAdmitsOnlySweepers(t *testing.T) {
	dir := t.TempDir()
	srvFiles, err := devtls.Prepare(dir, "executor", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := devtls.LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sweeper", "payments-api"} {
		if err := ca.Issue(dir, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	other, err := devtls.Prepare(filepath.Join(dir, "other"), "sweeper", nil)
	if err != nil {
		t.Fatal(err)
	}

	fs := flag.NewFlagSet("executor", flag.ContinueOnError)
	srvTLS := mtls.RegisterServer(fs, "sweeper")
	if err := fs.Parse([]string{"--tls-cert-file", srvFiles.CertFile, "--tls-key-file", srvFiles.KeyFile, "--tls-client-ca-file", srvFiles.CAFile}); err != nil {
		t.Fatal(err)
	}
	opts, err := srvTLS.Options()
	if err != nil {
		t.Fatal(err)
	}
	ex := &executor{}
	gs := grpc.NewServer(opts...)
	internalv1.RegisterExecutorServiceServer(gs, ex)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	pem := func(name string) (string, string) {
		return filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	}
	sweeperCert, sweeperKey := pem("sweeper")
	apiCert, apiKey := pem("payments-api")
	for _, tc := range []struct {
		name   string
		client mtls.Client
		want   codes.Code
	}{
		{"a sweeper", mtls.Client{CAFile: srvFiles.CAFile, CertFile: sweeperCert, KeyFile: sweeperKey}, codes.OK},
		{"another service of the same CA", mtls.Client{CAFile: srvFiles.CAFile, CertFile: apiCert, KeyFile: apiKey}, codes.PermissionDenied},
		{"a sweeper of another CA", mtls.Client{CAFile: srvFiles.CAFile, CertFile: other.CertFile, KeyFile: other.KeyFile}, codes.Unavailable},
		{"plaintext", mtls.Client{}, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ex.batches.Load()
			opt, err := tc.client.DialOption()
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient(lis.Addr().String(), opt)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := internalv1.NewExecutorServiceClient(cc).Execute(ctx, &internalv1.ExecuteRequest{SweeperId: "x"})
			if err == nil {
				_, err = st.Recv()
			}
			got := status.Code(err)
			if tc.want == codes.OK {
				if got != codes.OK && err.Error() != "EOF" {
					t.Fatalf("a sweeper was refused: %v", err)
				}
				if ex.batches.Load() != before+1 {
					t.Fatal("the sweeper's batch did not reach the executor")
				}
				return
			}
			if got != tc.want {
				t.Fatalf("got %v (%v), want %v", got, err, tc.want)
			}
			if ex.batches.Load() != before {
				t.Fatal("a refused client's batch reached the executor")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, s := range []mtls.Server{{CertFile: "c"}, {CertFile: "c", KeyFile: "k"}, {CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}} {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if (&mtls.Client{CAFile: "ca"}).Validate() == nil {
		t.Error("a client CA without a certificate was accepted")
	}
}
