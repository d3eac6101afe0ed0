package adminserver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/services/admin-api/adminserver"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// skewedGateway answers every probe with no charge, its clock offset from
// ours in the date header (none when omit).
type skewedGateway struct {
	gatewayv1.UnimplementedGatewayServiceServer
	offset time.Duration
	omit   bool
}

func (g skewedGateway) GetCharge(ctx context.Context, _ *gatewayv1.GetChargeRequest) (*gatewayv1.GetChargeResponse, error) {
	if !g.omit {
		_ = grpc.SetHeader(ctx, metadata.Pairs("date", time.Now().Add(g.offset).UTC().Format(http.TimeFormat)))
	}
	return nil, status.Error(codes.NotFound, "none")
}

// TestAdminAPIRefusesAGatewayClockBeyondTheMargin: admin-api compares the
// database's clock with the gateway's (the date its answers carry) at
// start, and refuses to start when they disagree by more than the
// contract's skew margin (10 minutes), or when the gateway does not say:
// probes look for a payment's charges from its due time less that margin,
// so a larger skew could prove an absence that is not one.
func TestAdminAPIRefusesAGatewayClockBeyondTheMargin(t *testing.T) {
	url := pgtest.NewURL(t)
	for _, c := range []struct {
		name   string
		gw     skewedGateway
		starts bool
	}{
		{"a minute ahead", skewedGateway{offset: time.Minute}, true},
		{"a minute behind", skewedGateway{offset: -time.Minute}, true},
		{"an hour ahead", skewedGateway{offset: time.Hour}, false},
		{"eleven minutes behind", skewedGateway{offset: -11 * time.Minute}, false},
		{"no date", skewedGateway{omit: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			gs := grpc.NewServer()
			gatewayv1.RegisterGatewayServiceServer(gs, c.gw)
			go func() { _ = gs.Serve(lis) }()
			defer gs.Stop()
			cfg := adminserver.Config{DatabaseURL: url, DBMaxConns: 4,
				Auth:    auth.Config{HS256Secret: []byte("secret"), Issuer: auth.DefaultIssuer, AdminAudience: auth.DefaultAdminAudience},
				Gateway: &dial.Flags{Kind: dial.KindGRPC, Addr: lis.Addr().String()}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv, err := adminserver.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if c.starts {
				if err != nil {
					t.Fatalf("refused within the margin: %v", err)
				}
				srv.Close()
				return
			}
			if err == nil {
				srv.Close()
				t.Fatal("admin-api started against a gateway whose clock it could not trust")
			}
			if !strings.Contains(err.Error(), "clock") {
				t.Fatalf("refused for another reason: %v", err)
			}
		})
	}
}
