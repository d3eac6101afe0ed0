package obs

import (
	"testing"
	"time"
)

func TestPprofListensOnLoopbackOnly(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true,
		"0.0.0.0:6060": false, ":6060": false, "10.0.0.5:6060": false, "[::]:6060": false, "pprof.example:6060": false, "6060": false,
	} {
		srv, err := PprofServer(addr)
		if (err == nil) != ok {
			t.Errorf("%s: err %v, want accepted=%v", addr, err, ok)
			continue
		}
		if ok && (srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout < 30*time.Second || srv.IdleTimeout <= 0) {
			t.Errorf("%s: timeouts %v %v %v %v: want all set, write ≥ 30 s for a CPU profile", addr,
				srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
		}
	}
}
