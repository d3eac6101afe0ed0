package obs

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// PprofServer returns the Go profiler's server for addr, which must be a
// loopback address: profiles and traces reveal internals (and cost CPU), so
// they are for someone already on the host (kubectl port-forward). Its
// timeouts let a 30 s CPU profile or trace finish and nothing hold on.
func PprofServer(addr string) (*http.Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr %q: want host:port", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof-addr %q: the profiler listens on loopback only (127.0.0.1, ::1 or localhost)", addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: time.Minute}, nil
}

// ServePprof serves the Go profiler on addr in the background; an empty addr
// leaves it off. A non-loopback addr is a configuration error.
func ServePprof(addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	srv, err := PprofServer(addr)
	if err != nil {
		return err
	}
	go func() {
		if err := srv.ListenAndServe(); err != nil {
			log.Warn("pprof server stopped", "err", err)
		}
	}()
	return nil
}
