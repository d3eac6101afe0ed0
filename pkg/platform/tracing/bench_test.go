package tracing_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/tools/gatewaysim"
)

// BenchmarkChargeRoundTrip is the executor -> gateway hot path (a Charge
// against gateway-sim's memory ledger over loopback TCP): without stats
// handlers (what ServerOption and DialOption install with tracing off),
// with otelgrpc's handlers and a no-op provider (why they do not), and with
// the handlers recording every span (exported to nowhere).
func BenchmarkChargeRoundTrip(b *testing.B) {
	recording := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = recording.Shutdown(context.Background()) })
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider // nil: no stats handlers
	}{
		{"plain", nil},
		{"otelgrpc-noop", noop.NewTracerProvider()},
		{"handlers-recording", recording},
	} {
		b.Run(c.name, func(b *testing.B) {
			var sopts []grpc.ServerOption
			dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if c.tp != nil {
				sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(c.tp))))
				dopts = append(dopts, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(c.tp))))
			}
			gs := grpc.NewServer(sopts...)
			gatewayv1.RegisterGatewayServiceServer(gs, gatewaysim.New(gatewaysim.NewMemLedger(), &gatewayv1.Faults{}))
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = gs.Serve(lis) }()
			defer gs.Stop()
			cc, err := grpc.NewClient(lis.Addr().String(), dopts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			client := gatewayv1.NewGatewayServiceClient(cc)
			ctx := context.Background()
			if c.tp != nil {
				var span trace.Span
				ctx, span = c.tp.Tracer("bench").Start(ctx, "batch")
				defer span.End()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				key := "bench-" + c.name + "-" + strconv.Itoa(i)
				if _, err := client.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: key, Reference: key,
					Amount: 500, Currency: "EUR", Payer: "alice", Payee: "bob"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDBTracerOff is the pgx tracer's cost on a statement outside any
// recording span (tracing off, or a poller's query).
func BenchmarkDBTracerOff(b *testing.B) {
	t := tracing.NewDBTracer()
	ctx := context.Background()
	data := pgx.TraceQueryStartData{SQL: "UPDATE payments SET status = $1 WHERE id = $2 AND attempt = $3"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		qctx := t.TraceQueryStart(ctx, nil, data)
		t.TraceQueryEnd(qctx, nil, pgx.TraceQueryEndData{})
	}
}

var (
	benchRoute = func(r *http.Request) string { return r.Method + " " + r.URL.Path }
	benchOK    = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
)

// BenchmarkHTTP is the REST wrapper's cost per request: tracing off (the
// handler itself), and on with a no-op provider (an unsampled request).
func BenchmarkHTTP(b *testing.B) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	defer otel.SetTracerProvider(provider)
	b.Setenv(tracing.EnvEndpoint, "")
	off := tracing.HTTP(benchRoute, benchOK)
	b.Setenv(tracing.EnvEndpoint, "http://127.0.0.1:4317")
	noopOn := tracing.HTTP(benchRoute, benchOK)
	req := httptest.NewRequest(http.MethodPost, "/v1/scheduled-payments", nil)
	w := httptest.NewRecorder()
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"plain", benchOK}, {"off", off}, {"on-noop", noopOn}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c.h.ServeHTTP(w, req)
			}
		})
	}
}
