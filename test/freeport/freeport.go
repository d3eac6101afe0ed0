// Package freeport hands out TCP ports on 127.0.0.1 to tests that start
// servers in other processes, so that two of them never get the same port.
//
// Asking the kernel for port 0 and closing the listener is not enough: the
// port comes from the ephemeral range, where every outgoing connection and
// every other test binary running in parallel draws too, and the process
// that is given the address binds it only later. Ports here come from below
// the ephemeral range, are never handed out twice by one process, and are
// reserved across processes by a lock file held until the process exits.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

const lowest = 20000

var (
	mu    sync.Mutex
	given = map[int]bool{}
	locks []*os.File // held open: the reservations last as long as the process
)

// Port returns a TCP port that is free on 127.0.0.1 now and that no other
// caller in any process using this package has been given.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	top := ephemeralStart()
	dir := filepath.Join(os.TempDir(), "paysched-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	for range 1000 {
		p := lowest + rand.IntN(top-lowest)
		if given[p] {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close() // another process holds it
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			return 0, fmt.Errorf("free port: lock: %w", err)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			f.Close() // taken by something that does not use this package
			continue
		}
		l.Close()
		given[p] = true
		locks = append(locks, f)
		return p, nil
	}
	return 0, errors.New("free port: none found")
}

// Addr returns "127.0.0.1:<port>" for a port from Port.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p), nil
}

// ephemeralStart reads where the kernel's ephemeral range begins (outgoing
// connections take ports from there on), 32768 when it cannot.
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil || n <= lowest+1000 {
		return 32768
	}
	return n
}
