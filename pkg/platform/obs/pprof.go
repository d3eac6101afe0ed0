package obs

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
)

// ServePprof serves the Go profiler on addr in the background; an empty addr
// leaves it off. Bind it to loopback: profiles reveal internals.
func ServePprof(addr string, log *slog.Logger) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go func() {
		if err := http.ListenAndServe(addr, mux); err != nil {
			log.Warn("pprof server stopped", "err", err)
		}
	}()
}
