// Package failover tests that an acknowledged write survives the loss of
// the primary: a primary and a synchronous standby (PostgreSQL streaming
// replication from deploy/local/pg.sh), the real binaries under load, the
// primary killed and the standby promoted.
package failover

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections to a target that can be switched, as a
// Kubernetes Service follows the primary (CloudNativePG's -rw): on Switch
// every open connection is cut and new ones go to the new target. Paused,
// it forwards nothing in either direction, and what it holds is lost when
// the connections are cut: a network partition.
type Proxy struct {
	ln     net.Listener
	target atomic.Value // string
	paused atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]bool
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, conns: map[net.Conn]bool{}}
	p.target.Store(target)
	go p.serve()
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is Addr's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Pause stops forwarding; Resume starts again.
func (p *Proxy) Pause()  { p.paused.Store(true) }
func (p *Proxy) Resume() { p.paused.Store(false) }

// Switch cuts every connection and sends new ones to target.
func (p *Proxy) Switch(target string) {
	p.target.Store(target)
	p.Cut()
}

// Cut closes every open connection, dropping whatever they hold.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops the proxy.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut()
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target.Load().(string), 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		// Paused, the bytes read are held here; a Cut meanwhile drops them.
		for p.paused.Load() && p.open(src) {
			time.Sleep(5 * time.Millisecond)
		}
		if !p.open(src) {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) open(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns[c]
}
