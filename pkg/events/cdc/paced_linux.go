package cdc

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Over a Unix socket the walsender's send per change is cheaper than over
// loopback TCP (its CPU during the spike of `make bench CDC=1` went from
// ~6.5 s to ~4.7 s), but a Unix socket has no receive low-water mark: the
// Go netpoller would wake the connector for every change. pacedConn reads
// the socket outside the netpoller instead: a non-blocking read takes
// whatever waits, and an empty one sleeps (pacedMin, doubling up to
// pacedMax while the stream stays quiet), so a spike is read in batches of
// a millisecond's changes and nothing wakes the connector in between. Not
// longer: the walsender's socket buffer (~200 KB of per-message overhead
// and data) fills in about 2 ms at a spike's rate, and a full one stalls it
// (2 ms pauses raised the CDC lag p99 from ~1.7 s to ~3.4 s).
const (
	pacedMin = time.Millisecond
	pacedMax = pollEvery
)

// dialPaced connects to a Unix socket and takes the connection out of the
// netpoller: a duplicate of its descriptor is kept, the original closed.
func dialPaced(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UnixConn)
	raw, err := uc.SyscallConn()
	if err != nil {
		_ = uc.Close()
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(f uintptr) { fd, derr = dupCloexec(int(f)) }); err != nil {
		_ = uc.Close()
		return nil, err
	}
	local, remote := uc.LocalAddr(), uc.RemoteAddr()
	_ = uc.Close() // deregisters from the netpoller; the duplicate keeps the socket open
	if derr != nil {
		return nil, os.NewSyscallError("dup", derr)
	}
	return &pacedConn{fd: fd, local: local, remote: remote}, nil
}

func dupCloexec(fd int) (int, error) {
	for {
		nfd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return -1, errno
		}
		return int(nfd), nil
	}
}

// pacedConn is a net.Conn over a socket descriptor the netpoller does not
// watch. Reads and writes never block in the kernel (MSG_DONTWAIT), so
// deadlines are checked between tries, and Close is safe at any time.
type pacedConn struct {
	// mu is held shared around each syscall and exclusively by Close, so
	// the descriptor is never closed (and its number reused) under one.
	mu            sync.RWMutex
	fd            int
	closed        bool
	local, remote net.Addr
	// Deadlines as Unix nanoseconds, 0 for none.
	readDL, writeDL atomic.Int64
}

func (c *pacedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	pause := pacedMin
	for {
		n, err := c.syscall(func(fd int) (int, error) {
			n, _, err := syscall.Recvfrom(fd, p, syscall.MSG_DONTWAIT)
			return n, err
		})
		switch {
		case err == nil && n > 0:
			return n, nil
		case err == nil:
			return 0, io.EOF
		case err == syscall.EINTR:
			continue
		case err != syscall.EAGAIN:
			return 0, c.opError("read", err)
		}
		if err := c.wait(&c.readDL, pause, "read"); err != nil {
			return 0, err
		}
		pause = min(2*pause, pacedMax)
	}
}

func (c *pacedConn) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := c.syscall(func(fd int) (int, error) {
			return syscall.SendmsgN(fd, p[done:], nil, nil, syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL)
		})
		if n > 0 {
			done += n
		}
		switch {
		case err == nil || err == syscall.EINTR:
		case err == syscall.EAGAIN:
			// The peer reads slowly: wait a little, as a blocked write would.
			if err := c.wait(&c.writeDL, pacedMin, "write"); err != nil {
				return done, err
			}
		default:
			return done, c.opError("write", err)
		}
	}
	return done, nil
}

// syscall runs f on the descriptor unless the connection is closed.
func (c *pacedConn) syscall(f func(fd int) (int, error)) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	return f(c.fd)
}

// wait sleeps for pause, or until the deadline if sooner, and says when
// the deadline has passed.
func (c *pacedConn) wait(deadline *atomic.Int64, pause time.Duration, op string) error {
	if dl := deadline.Load(); dl != 0 {
		left := time.Until(time.Unix(0, dl))
		if left <= 0 {
			return c.opError(op, os.ErrDeadlineExceeded)
		}
		pause = min(pause, left)
	}
	time.Sleep(pause)
	return nil
}

func (c *pacedConn) opError(op string, err error) error {
	if errno, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError(op, errno)
	}
	return &net.OpError{Op: op, Net: "unix", Source: c.local, Addr: c.remote, Err: err}
}

func (c *pacedConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opError("close", net.ErrClosed)
	}
	c.closed = true
	return syscall.Close(c.fd)
}

func (c *pacedConn) LocalAddr() net.Addr  { return c.local }
func (c *pacedConn) RemoteAddr() net.Addr { return c.remote }

func (c *pacedConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *pacedConn) SetReadDeadline(t time.Time) error {
	c.readDL.Store(unixNanos(t))
	return nil
}

func (c *pacedConn) SetWriteDeadline(t time.Time) error {
	c.writeDL.Store(unixNanos(t))
	return nil
}

func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}
