package cdc

import (
	"net"
	"syscall"
)

// setRcvLowat sets a TCP socket's receive low-water mark: the kernel wakes
// a reader once that many bytes wait, not at every segment. A non-blocking
// read still returns whatever is there, so data under the mark is read at
// the next poll (see pollEvery). Unix sockets wake readers per message
// regardless, so they are left alone.
func setRcvLowat(c net.Conn, n int) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, n)
	}); err != nil {
		return err
	}
	return serr
}
