// Package tracing is paysched's OpenTelemetry tracing: Setup installs the
// W3C propagators always and an OTLP/gRPC exporting TracerProvider only when
// OTEL_EXPORTER_OTLP_ENDPOINT is set; otherwise the global provider stays the
// no-op one and every span below costs next to nothing. The package also
// holds the instrumentation the services share: gRPC stats handlers
// (otelgrpc), a pgx tracer (a span per statement) and a span per REST
// request.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/paysched/paysched/pkg/platform/obs"
)

// Environment variables that turn export on (the standard OpenTelemetry
// ones; the exporter reads the rest of OTEL_EXPORTER_OTLP_* itself).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
)

// ScopeName is the instrumentation scope of the spans paysched starts itself.
const ScopeName = "github.com/paysched/paysched"

// Enabled reports whether the environment asks for spans to be exported: an
// OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or its traces-only
// variant) and OTEL_SDK_DISABLED is not true.
func Enabled() bool { return Endpoint() != "" }

// Endpoint is the OTLP endpoint spans go to ("" when tracing is off): the
// traces-only variable wins over the general one, as in the exporter.
func Endpoint() string {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(EnvSDKDisabled)), "true") {
		return ""
	}
	if e := os.Getenv(EnvTracesEndpoint); e != "" {
		return e
	}
	return os.Getenv(EnvEndpoint)
}

// Propagator is what paysched sends and accepts on every hop: W3C trace
// context and baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup installs the global propagator (always) and, when Enabled, a
// TracerProvider exporting over OTLP/gRPC through a batch span processor,
// with a resource naming serviceName (OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override it) and the instance id. Sampling is
// Sampler's: OTEL_TRACES_SAMPLER's rate, which a caller's traceparent never
// overrides. The
// returned shutdown flushes the spans still buffered and stops the exporter;
// when tracing is off it does nothing.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator())
	if !Enabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(
			attribute.String("service.name", serviceName),
			attribute.String("service.namespace", "paysched"),
			attribute.String("service.instance.id", obs.InstanceID(serviceName)),
		),
		// Last, so the operator's OTEL_SERVICE_NAME and
		// OTEL_RESOURCE_ATTRIBUTES win.
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(Sampler()))
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: flush spans: %w", err)
		}
		return nil
	}, nil
}

// Sampler decides which traces are recorded: the rate of
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (always_on, always_off,
// traceidratio or their parentbased_ forms; default always on), by trace
// id, for every span without a local parent, a remote one included: a
// traceparent from the internet that says "sampled" does not make paysched
// record (and pay for) a trace its own rate would not, and one that says
// "not sampled" does not hide one. Decided by trace id, every service of
// one trace decides alike, so the internal hops stay whole. Spans with a
// local parent follow it.
func Sampler() sdktrace.Sampler {
	root := sdktrace.AlwaysSample()
	name := strings.TrimPrefix(os.Getenv("OTEL_TRACES_SAMPLER"), "parentbased_")
	switch name {
	case "always_off":
		root = sdktrace.NeverSample()
	case "traceidratio":
		ratio := 1.0
		if v, err := strconv.ParseFloat(os.Getenv("OTEL_TRACES_SAMPLER_ARG"), 64); err == nil && v >= 0 && v <= 1 {
			ratio = v
		}
		root = sdktrace.TraceIDRatioBased(ratio)
	}
	return sdktrace.ParentBased(root, sdktrace.WithRemoteParentSampled(root), sdktrace.WithRemoteParentNotSampled(root))
}

// ErrorLogger returns an OpenTelemetry error handler that logs to log at most
// once per interval, so an unreachable collector does not flood the logs.
func ErrorLogger(log *slog.Logger, interval time.Duration) otel.ErrorHandler {
	var last atomic.Int64
	return otel.ErrorHandlerFunc(func(err error) {
		now := time.Now().UnixNano()
		prev := last.Load()
		if prev != 0 && now-prev < int64(interval) {
			return
		}
		if last.CompareAndSwap(prev, now) {
			log.Warn("tracing", "err", err)
		}
	})
}
