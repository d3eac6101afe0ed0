package tracing_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/test/pgtest"
	"github.com/paysched/paysched/tools/gatewaysim"
)

// spans records every span the test binary ends. The global provider is set
// once: tracers taken from the global delegate bind to the first provider.
var (
	spans    = tracetest.NewInMemoryExporter()
	provider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	testMu   sync.Mutex // tests that read spans run one at a time
)

func TestMain(m *testing.M) {
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(tracing.Propagator())
	pgtest.Main(m)
}

// record clears the recorded spans and holds them for this test.
func record(t *testing.T) {
	t.Helper()
	testMu.Lock()
	spans.Reset()
	t.Cleanup(testMu.Unlock)
}

// on makes Enabled true for the instrumentation built during the test
// (nothing is exported: the global provider stays the recorder).
func on(t *testing.T) {
	t.Helper()
	t.Setenv(tracing.EnvEndpoint, "http://127.0.0.1:4317")
	t.Setenv(tracing.EnvSDKDisabled, "")
}

func find(t *testing.T, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	var got []string
	for _, s := range spans.GetSpans() {
		if s.Name == name && s.SpanKind == kind {
			return s
		}
		got = append(got, s.Name+"/"+s.SpanKind.String())
	}
	t.Fatalf("no %s span %q among %v", kind, name, got)
	return tracetest.SpanStub{}
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// fakeExecutor does what the real one does with a batch, in miniature: a
// statement and a gateway charge under the RPC's context.
type fakeExecutor struct {
	internalv1.UnimplementedExecutorServiceServer
	query func(ctx context.Context) error
	gw    gatewayv1.GatewayServiceClient
}

func (f *fakeExecutor) Execute(req *internalv1.ExecuteRequest, stream internalv1.ExecutorService_ExecuteServer) error {
	if len(req.GetItems()) == 0 {
		return nil // a sweeper's hello
	}
	ctx := stream.Context()
	if err := f.query(ctx); err != nil {
		return err
	}
	out := &internalv1.ExecuteResponse{}
	for _, it := range req.GetItems() {
		if _, err := f.gw.Charge(ctx, &gatewayv1.ChargeRequest{IdempotencyKey: it.GetPaymentId(), Amount: 500,
			Currency: "EUR", Payer: "alice", Payee: "bob", Reference: it.GetPaymentId()}); err != nil {
			return err
		}
		out.Outcomes = append(out.Outcomes, &internalv1.Outcome{PaymentId: it.GetPaymentId(), Result: internalv1.Result_RESULT_SUCCEEDED})
	}
	return stream.Send(out)
}

// serve runs gs on a loopback listener and returns a traced client
// connection to it.
func serve(t *testing.T, gs *grpc.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), tracing.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestPropagation follows one batch across two gRPC hops and a database:
// sweeper span -> Execute client -> Execute server -> SELECT and Charge
// client -> Charge server, all in one trace, each the child of the one before.
func TestPropagation(t *testing.T) {
	record(t)
	on(t)
	ctx := context.Background()
	pool, err := svc.Pool(ctx, pgtest.NewURL(t), 4) // svc.Pool installs the pgx tracer
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	gwSrv := grpc.NewServer(tracing.ServerOption())
	gatewayv1.RegisterGatewayServiceServer(gwSrv, gatewaysim.New(gatewaysim.NewMemLedger(), &gatewayv1.Faults{}))
	healthpb.RegisterHealthServer(gwSrv, health.NewServer())
	gwConn := serve(t, gwSrv)

	exSrv := grpc.NewServer(tracing.ServerOption())
	internalv1.RegisterExecutorServiceServer(exSrv, &fakeExecutor{
		gw: gatewayv1.NewGatewayServiceClient(gwConn),
		query: func(ctx context.Context) error {
			var n int
			return pool.QueryRow(ctx, "-- count\n  select count(*) from payments").Scan(&n)
		},
	})
	exConn := serve(t, exSrv)

	// Health checks are not traced.
	if _, err := healthpb.NewHealthClient(gwConn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}

	rctx, root := otel.Tracer("test").Start(ctx, "sweeper.dispatch")
	st, err := internalv1.NewExecutorServiceClient(exConn).Execute(rctx, &internalv1.ExecuteRequest{SweeperId: "s",
		Items: []*internalv1.WorkItem{{PaymentId: "7f8a3c2e-0000-4000-8000-000000000001"}}})
	for err == nil {
		_, err = st.Recv()
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	// The server ends its span after the client has its answer.
	deadline := time.Now().Add(5 * time.Second)
	for len(spans.GetSpans()) < 7 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}

	rootS := find(t, "sweeper.dispatch", trace.SpanKindInternal)
	exClient := find(t, "paysched.internal.v1.ExecutorService/Execute", trace.SpanKindClient)
	exServer := find(t, "paysched.internal.v1.ExecutorService/Execute", trace.SpanKindServer)
	sel := find(t, "SELECT", trace.SpanKindClient)
	gwClient := find(t, "gateway.v1.GatewayService/Charge", trace.SpanKindClient)
	gwServer := find(t, "gateway.v1.GatewayService/Charge", trace.SpanKindServer)

	tid := rootS.SpanContext.TraceID()
	for _, c := range []struct {
		name          string
		child, parent tracetest.SpanStub
	}{
		{"Execute client under the batch", exClient, rootS},
		{"Execute server under its client", exServer, exClient},
		{"SELECT under Execute server", sel, exServer},
		{"Charge client under Execute server", gwClient, exServer},
		{"Charge server under its client", gwServer, gwClient},
	} {
		if got := c.child.SpanContext.TraceID(); got != tid {
			t.Errorf("%s: trace id %s, want %s", c.name, got, tid)
		}
		if got, want := c.child.Parent.SpanID(), c.parent.SpanContext.SpanID(); got != want {
			t.Errorf("%s: parent %s, want %s", c.name, got, want)
		}
	}
	if !exServer.Parent.IsRemote() {
		t.Error("the Execute server span's parent should be remote (propagated over gRPC)")
	}
	if v, _ := attr(sel, "db.system"); v.AsString() != "postgresql" {
		t.Errorf("db.system = %q", v.AsString())
	}
	if v, _ := attr(sel, "db.statement"); !strings.Contains(v.AsString(), "select count(*) from payments") {
		t.Errorf("db.statement = %q", v.AsString())
	}
	for _, s := range spans.GetSpans() {
		if strings.Contains(s.Name, "grpc.health") {
			t.Errorf("health check traced: %s", s.Name)
		}
	}
}

// TestDB: a failed statement records its error; statements outside any
// traced request make no span.
func TestDB(t *testing.T) {
	record(t)
	ctx := context.Background()
	pool, err := svc.Pool(ctx, pgtest.NewURL(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if n := len(spans.GetSpans()); n != 0 {
		t.Fatalf("%d spans for a statement without a parent span, want 0", n)
	}

	pctx, parent := otel.Tracer("test").Start(ctx, "request")
	if _, err := pool.Exec(pctx, "UPDATE no_such_table SET x = 1"); err == nil {
		t.Fatal("want an error")
	}
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue("SELECT 2")
	br := pool.SendBatch(pctx, b)
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	parent.End()

	upd := find(t, "UPDATE", trace.SpanKindClient)
	if upd.Status.Code != codes.Error || len(upd.Events) == 0 || upd.Events[0].Name != "exception" {
		t.Errorf("failed statement: status %v, events %v", upd.Status, upd.Events)
	}
	if upd.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Error("UPDATE is not the request's child")
	}
	batch := find(t, "BATCH", trace.SpanKindClient)
	if v, _ := attr(batch, "db.batch.size"); v.AsInt64() != 2 {
		t.Errorf("db.batch.size = %v", v.AsInt64())
	}
}

// TestHTTP: a REST request continues the caller's trace and its handler's
// work is its child; the span is named by route and records 5xx as errors.
func TestHTTP(t *testing.T) {
	record(t)
	on(t)
	var inner trace.SpanContext
	h := tracing.HTTP(func(r *http.Request) string { return r.Method + " /v1/things/{id}" },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner = trace.SpanContextFromContext(r.Context())
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
	req := httptest.NewRequest(http.MethodGet, "/v1/things/42", nil)
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), req)

	s := find(t, "GET /v1/things/{id}", trace.SpanKindServer)
	if got := s.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %s: the caller's traceparent was not continued", got)
	}
	if got := s.Parent.SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("parent %s", got)
	}
	if inner.SpanID() != s.SpanContext.SpanID() {
		t.Error("the handler does not run under the request's span")
	}
	if v, _ := attr(s, "http.response.status_code"); v.AsInt64() != 503 || s.Status.Code != codes.Error {
		t.Errorf("status %v, code attribute %v", s.Status, v.AsInt64())
	}
}

// TestSetupOff: without an OTLP endpoint Setup installs the propagator and
// nothing that exports.
func TestSetupOff(t *testing.T) {
	t.Setenv(tracing.EnvEndpoint, "")
	t.Setenv(tracing.EnvTracesEndpoint, "")
	before := otel.GetTracerProvider()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	defer otel.SetTextMapPropagator(tracing.Propagator())
	shutdown, err := tracing.Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if tracing.Enabled() {
		t.Error("Enabled without an endpoint")
	}
	if otel.GetTracerProvider() != before {
		t.Errorf("Setup replaced the tracer provider with %T", otel.GetTracerProvider())
	}
	fields := otel.GetTextMapPropagator().Fields()
	if !slices.Contains(fields, "traceparent") || !slices.Contains(fields, "baggage") {
		t.Errorf("propagator fields %v", fields)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	// Nor do the gRPC and HTTP instrumentation add anything.
	next := &okHandler{}
	if h := tracing.HTTP(func(*http.Request) string { return "x" }, next); h != http.Handler(next) {
		t.Errorf("HTTP wrapped the handler (%T) with tracing off", h)
	}
	if _, ok := tracing.ServerOption().(grpc.EmptyServerOption); !ok {
		t.Errorf("ServerOption is %T with tracing off", tracing.ServerOption())
	}
	if _, ok := tracing.DialOption().(grpc.EmptyDialOption); !ok {
		t.Errorf("DialOption is %T with tracing off", tracing.DialOption())
	}
	t.Setenv(tracing.EnvEndpoint, "http://127.0.0.1:4317")
	t.Setenv(tracing.EnvSDKDisabled, "true")
	if tracing.Enabled() {
		t.Error("Enabled with OTEL_SDK_DISABLED=true")
	}
}

type okHandler struct{}

func (*okHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// collector is an OTLP trace receiver.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
}

func (c *collector) Export(_ context.Context, r *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, r)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestSetupOn: with OTEL_EXPORTER_OTLP_ENDPOINT set, spans reach an OTLP
// collector by the time shutdown returns, with the service's resource.
func TestSetupOn(t *testing.T) {
	testMu.Lock()
	defer testMu.Unlock()
	col := &collector{}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	t.Setenv(tracing.EnvEndpoint, "http://"+lis.Addr().String())
	t.Setenv("OTEL_SERVICE_NAME", "")
	ctx := context.Background()
	shutdown, err := tracing.Setup(ctx, "executor")
	if err != nil {
		t.Fatal(err)
	}
	defer otel.SetTracerProvider(provider) // back to the recorder for the other tests
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
		t.Fatalf("provider %T, want the SDK's", otel.GetTracerProvider())
	}
	_, span := otel.GetTracerProvider().Tracer("test").Start(ctx, "exported")
	span.End()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	var name, service, instance string
	for _, r := range col.reqs {
		for _, rs := range r.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				switch kv.GetKey() {
				case "service.name":
					service = kv.GetValue().GetStringValue()
				case "service.instance.id":
					instance = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					name = s.GetName()
				}
			}
		}
	}
	host, _ := os.Hostname()
	if name != "exported" || service != "executor" || !strings.HasPrefix(instance, "executor-"+host) {
		t.Errorf("collector got span %q from service %q instance %q", name, service, instance)
	}
}

// TestInboundTraceContextNeverForcesSampling: a caller's traceparent
// saying "sampled" does not make paysched record a trace its own rate
// would not, and "not sampled" does not hide one its rate would record.
func TestInboundTraceContextNeverForcesSampling(t *testing.T) {
	remote := func(sampled bool) context.Context {
		flags := trace.TraceFlags(0)
		if sampled {
			flags = trace.FlagsSampled
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: flags, Remote: true})
		return trace.ContextWithRemoteSpanContext(context.Background(), sc)
	}
	for _, c := range []struct {
		sampler, arg  string
		remoteSampled bool
		want          sdktrace.SamplingDecision
	}{
		{"parentbased_traceidratio", "0", true, sdktrace.Drop},
		{"traceidratio", "0", true, sdktrace.Drop},
		{"always_off", "", true, sdktrace.Drop},
		{"parentbased_always_on", "", false, sdktrace.RecordAndSample},
		{"", "", false, sdktrace.RecordAndSample},
	} {
		t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
		ctx := remote(c.remoteSampled)
		got := tracing.Sampler().ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx,
			TraceID: trace.SpanContextFromContext(ctx).TraceID(), Name: "POST /v1/scheduled-payments", Kind: trace.SpanKindServer})
		if got.Decision != c.want {
			t.Errorf("%s=%s, caller says sampled=%v: %v, want %v", c.sampler, c.arg, c.remoteSampled, got.Decision, c.want)
		}
	}
}
