package cdc

import (
	"net"
	"syscall"
	"testing"
)

// The low-water mark is set on TCP connections and left alone on others.
func TestSetRcvLowat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := setRcvLowat(c, rcvLowat); err != nil {
		t.Fatal(err)
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got != rcvLowat {
		t.Fatalf("SO_RCVLOWAT %d, want %d", got, rcvLowat)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if err := setRcvLowat(a, rcvLowat); err != nil {
		t.Fatalf("not a TCP connection: %v", err)
	}
}
