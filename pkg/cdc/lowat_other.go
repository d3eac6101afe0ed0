//go:build !linux

package cdc

import "net"

// setRcvLowat is Linux only; elsewhere the reader wakes per segment.
func setRcvLowat(net.Conn, int) error { return nil }
