//go:build !linux

package cdc

import (
	"context"
	"net"
)

// setRcvLowat is Linux only; elsewhere the reader wakes per segment.
func setRcvLowat(net.Conn, int) error { return nil }

// dialPaced is Linux only; elsewhere a Unix socket is read through the
// netpoller, woken per message.
func dialPaced(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", addr)
}
