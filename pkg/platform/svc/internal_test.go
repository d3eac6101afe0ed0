package svc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/platform/svc"
)

// TestInternalListenerKeepsMetricsApart: with an internal listener,
// /metrics is served there and not on the public one (the reconciler's
// webhook port, which the ingress controller reaches), while the public
// one keeps its handlers and /healthz.
func TestInternalListenerKeepsMetricsApart(t *testing.T) {
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	il, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	hook := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	go func() {
		done <- svc.Server{Name: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry(),
			HTTPListener: hl, InternalListener: il, Handlers: map[string]http.Handler{"POST /hook": hook},
			Grace: time.Second}.Run(ctx, nil)
	}()
	t.Cleanup(func() { cancel(); _ = <-done })
	public, internal := "http://"+hl.Addr().String(), "http://"+il.Addr().String()
	for _, tc := range []struct {
		method, url string
		want        int
	}{
		{"GET", public + "/metrics", http.StatusNotFound},
		{"POST", public + "/hook", http.StatusNoContent},
		{"GET", public + "/healthz", http.StatusOK},
		{"GET", internal + "/metrics", http.StatusOK},
		{"GET", internal + "/healthz", http.StatusOK},
		{"POST", internal + "/hook", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tc.method, tc.url, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.url, res.StatusCode, tc.want)
		}
	}
}
