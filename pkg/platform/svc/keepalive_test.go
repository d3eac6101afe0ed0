package svc_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/paysched/paysched/pkg/platform/svc"
)

// TestPingFloodIsCutOff: a client that pings with no call open, faster
// than the keepalive policy allows (every 30 s), is told GOAWAY
// ENHANCE_YOUR_CALM and disconnected; one ping is tolerated. The client
// speaks raw HTTP/2 (grpc-go's own client will not ping that often).
func TestPingFloodIsCutOff(t *testing.T) {
	gs := grpc.NewServer(svc.GRPCServerOptions()...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	// pings sends n pings and reads the server's frames for a while:
	// whether it went away, and with what code.
	pings := func(n int) (goaway bool, code http2.ErrCode) {
		conn, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(conn, conn)
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
				return false, 0 // the server already hung up
			}
		}
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return false, 0
				}
				return goaway, code // closed after the GOAWAY
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.GoAwayFrame:
				goaway, code = true, f.ErrCode
			}
		}
	}
	if away, code := pings(1); away {
		t.Fatalf("one ping was answered with GOAWAY %v", code)
	}
	away, code := pings(10)
	if !away || code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("a ping flood: goaway=%v code=%v, want GOAWAY ENHANCE_YOUR_CALM", away, code)
	}
}
