package tracing

import (
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/paysched/paysched/pkg/platform/obs"
)

// HTTP wraps next with a server span per request, named by route (method
// and route pattern, never raw ids) and a child of the caller's span when
// the request carries a traceparent header. The REST gateway runs the gRPC
// handlers in process, so this span is the parent of their database spans.
// When tracing is off (Enabled is false) it returns next itself.
func HTTP(route func(*http.Request) string, next http.Handler) http.Handler {
	if !Enabled() {
		return next
	}
	tracer := otel.Tracer(ScopeName + "/http")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parent := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		// Named once known to record: route names cost an allocation.
		ctx, span := tracer.Start(parent, "HTTP", trace.WithSpanKind(trace.SpanKindServer))
		if !span.IsRecording() {
			// Tracing is off (or this trace is not sampled): pass on the
			// caller's trace context, if any, and do nothing else.
			if parent != r.Context() {
				r = r.WithContext(parent)
			}
			next.ServeHTTP(w, r)
			return
		}
		defer span.End()
		span.SetName(route(r))
		span.SetAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("url.path", r.URL.Path),
		)
		sw := obs.NewStatusWriter(w)
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.Code))
		if sw.Code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.Code))
		}
	})
}
