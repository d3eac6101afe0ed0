package svc_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/platform/svc"
)

// TestHealthPerServiceFollowsReady: grpc.health.v1 answers for "" and for
// each registered service by name, and every one turns NOT_SERVING while
// Ready fails (the database is unreachable) and back when it recovers.
func TestHealthPerServiceFollowsReady(t *testing.T) {
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, gatewayv1.UnimplementedGatewayServiceServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- svc.Server{Name: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil)), GRPC: gs, GRPCListener: lis,
			Registry: prometheus.NewRegistry(), HTTPListener: hl,
			ReadyInterval: 20 * time.Millisecond, Grace: time.Second,
			Ready: func(context.Context) error {
				if down.Load() {
					return errors.New("database unreachable")
				}
				return nil
			}}.Run(ctx, nil)
	}()
	t.Cleanup(func() { cancel(); <-done })
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	wait := func(service string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			if err == nil && r.GetStatus() == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health of %q: %v %v, want %v", service, r.GetStatus(), err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, s := range []string{"", "gateway.v1.GatewayService"} {
		wait(s, healthpb.HealthCheckResponse_SERVING)
	}
	down.Store(true)
	for _, s := range []string{"", "gateway.v1.GatewayService"} {
		wait(s, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	down.Store(false)
	wait("gateway.v1.GatewayService", healthpb.HealthCheckResponse_SERVING)
}
