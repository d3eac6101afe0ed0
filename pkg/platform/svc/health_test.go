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
	"google.golang.org/grpc/health"
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
	t.Cleanup(func() { cancel(); _ = <-done })
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

// TestStreamLimit: a client connection gets at most MaxConcurrentStreams
// calls at once from a server built with GRPCServerOptions; the next waits
// until one ends.
func TestStreamLimit(t *testing.T) {
	gs := grpc.NewServer(svc.GRPCServerOptions()...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := func(ctx context.Context) error {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = w.Recv()
		return err
	}
	cancels := make([]context.CancelFunc, svc.MaxConcurrentStreams)
	for i := range cancels {
		sctx, c := context.WithCancel(ctx)
		cancels[i] = c
		if err := watch(sctx); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	extra := make(chan error, 1)
	go func() { extra <- watch(ctx) }()
	select {
	case err := <-extra:
		t.Fatalf("stream %d started past the limit (%v)", svc.MaxConcurrentStreams+1, err)
	case <-time.After(300 * time.Millisecond):
	}
	cancels[0]()
	select {
	case err := <-extra:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting stream never started after one ended")
	}
}
