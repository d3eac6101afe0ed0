// Package obs is paysched's observability wiring: JSON logs, Prometheus
// metrics for gRPC and HTTP, and the /metrics handler.
package obs

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Logger returns a JSON slog logger tagged with the service name.
func Logger(service string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("service", service)
}

// Registry is a Prometheus registry with the Go and process collectors.
func Registry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves r at /metrics.
func Handler(r *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r})
}

// RPCMetrics counts and times requests by transport, method and code.
type RPCMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewRPCMetrics registers paysched_requests_total and
// paysched_request_duration_seconds on r.
func NewRPCMetrics(r prometheus.Registerer) *RPCMetrics {
	m := &RPCMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "paysched_requests_total", Help: "API requests by transport, method and result code.",
		}, []string{"transport", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "paysched_request_duration_seconds", Help: "API request latency.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"transport", "method"}),
	}
	r.MustRegister(m.requests, m.latency)
	return m
}

// UnaryInterceptor records gRPC calls.
func (m *RPCMetrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		m.requests.WithLabelValues("grpc", info.FullMethod, status.Code(err).String()).Inc()
		m.latency.WithLabelValues("grpc", info.FullMethod).Observe(time.Since(start).Seconds())
		return resp, err
	}
}

// HTTP records REST calls; route names the endpoint without ids.
func (m *RPCMetrics) HTTP(route func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := NewStatusWriter(w)
		next.ServeHTTP(sw, r)
		name := route(r)
		m.requests.WithLabelValues("http", name, strconv.Itoa(sw.Code)).Inc()
		m.latency.WithLabelValues("http", name).Observe(time.Since(start).Seconds())
	})
}

// StatusWriter remembers the status code a handler wrote (200 when it
// wrote none), for metrics and spans.
type StatusWriter struct {
	http.ResponseWriter
	// Code is the status written.
	Code  int
	wrote bool
}

// NewStatusWriter wraps w.
func NewStatusWriter(w http.ResponseWriter) *StatusWriter {
	return &StatusWriter{ResponseWriter: w, Code: http.StatusOK}
}

// WriteHeader records the first code written.
func (w *StatusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.Code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes the body (a 200 unless WriteHeader came first).
func (w *StatusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// InstanceID names a process instance: service, host and pid. Sweepers use
// it as their lease owner and executors in attempt rows.
func InstanceID(service string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%s-%d", service, host, os.Getpid())
}
