package cdc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// pacedPair is a pacedConn dialled to a Unix listener, and the listener's
// side of it.
func pacedPair(t *testing.T) (*pacedConn, net.Conn) {
	t.Helper()
	addr := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := dialPaced(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c.(*pacedConn), peer
}

func TestPacedConn(t *testing.T) {
	t.Run("reads what the peer writes, then EOF", func(t *testing.T) {
		c, peer := pacedPair(t)
		go func() {
			_, _ = peer.Write([]byte("hello "))
			time.Sleep(30 * time.Millisecond) // a quiet stream: the reader backs off
			_, _ = peer.Write([]byte("world"))
			peer.Close()
		}()
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "hello world" {
			t.Fatalf("read %q, %v", got, err)
		}
	})
	t.Run("a read deadline times out", func(t *testing.T) {
		c, _ := pacedPair(t)
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		start := time.Now()
		_, err := c.Read(make([]byte, 10))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("want a timeout, got %v", err)
		}
		if d := time.Since(start); d < 40*time.Millisecond || d > time.Second {
			t.Fatalf("timed out after %v", d)
		}
		// A deadline moved into the past interrupts a read under way, as
		// pgconn does to cancel.
		_ = c.SetReadDeadline(time.Time{})
		go func() { time.Sleep(50 * time.Millisecond); _ = c.SetReadDeadline(time.Now()) }()
		if _, err := c.Read(make([]byte, 10)); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("want a timeout, got %v", err)
		}
	})
	t.Run("close ends a read under way", func(t *testing.T) {
		c, _ := pacedPair(t)
		go func() { time.Sleep(50 * time.Millisecond); _ = c.Close() }()
		if _, err := c.Read(make([]byte, 10)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("want net.ErrClosed, got %v", err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after close: want net.ErrClosed, got %v", err)
		}
	})
	t.Run("a write larger than the socket buffers waits for the reader", func(t *testing.T) {
		c, peer := pacedPair(t)
		big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MB
		got := make(chan []byte, 1)
		go func() {
			time.Sleep(20 * time.Millisecond) // the writer fills the buffers first
			b, _ := io.ReadAll(peer)
			got <- b
		}()
		if n, err := c.Write(big); err != nil || n != len(big) {
			t.Fatalf("wrote %d, %v", n, err)
		}
		_ = c.Close()
		if b := <-got; !bytes.Equal(b, big) {
			t.Fatalf("peer read %d bytes, want %d", len(b), len(big))
		}
	})
}
