package enginetest

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/pkg/engine/sweeper"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/test/freeport"
)

// An executor that starts after its sweeper (or restarts under it) gets
// work as soon as it listens: the sweeper watches the connection and asks
// again when it comes up, not at its next re-resolve. The re-resolve here
// is an hour away, so without the watch the payment would wait that long.
func TestAnExecutorUpAfterTheSweeperGetsWorkAtOnce(t *testing.T) {
	c := newCluster(t, opts{noSweeper: true, noReaper: true})
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	late := fmt.Sprintf("127.0.0.1:%d", port)
	reg := prometheus.NewRegistry()
	sw, err := sweeper.New(sweeper.Config{ID: "sweeper-early", Interval: 50 * time.Millisecond, Cooldown: 25 * time.Millisecond,
		Batch: 10, Lease: 30 * time.Second, Executors: []string{late}, Resolve: time.Hour, Slots: 1, Grace: 5 * time.Second,
		Bucket: pacing.Bucket{Name: "gateway"}}, c.db, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sw.Run(ctx) }()
	defer func() { cancel(); <-done }()
	id := c.schedule(1, "bob", time.Now())[0]
	// The sweeper dials nothing for a while: its redial backoff grows to
	// its cap.
	time.Sleep(3 * time.Second)
	if st, _ := c.status(id); st != "PENDING" {
		t.Fatalf("%s before any executor listened", st)
	}
	if n := gauge(t, reg, "paysched_sweeper_executors_refused"); n != 1 {
		t.Fatalf("%v executors reported refused before it listened, want 1", n)
	}
	// The executor comes up: a forwarder to the cluster's executor, on
	// the address the sweeper has been dialling.
	lis, err := net.Listen("tcp", late)
	if err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	go forward(lis, c.execs[0])
	t.Cleanup(func() { lis.Close() })
	var admitted time.Duration
	for deadline := up.Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if admitted == 0 && gauge(t, reg, "paysched_sweeper_executors_refused") == 0 {
			admitted = time.Since(up)
		}
		if st, _ := c.status(id); st == "COMPLETED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the payment was not executed within 10 s of its executor coming up (admitted after %s)", admitted)
		}
	}
	// By construction the redial waits at most svc.MaxRedial, under a
	// second; the figure is logged, not asserted (a loaded host may add
	// its own delay).
	t.Logf("admitted %s after the executor listened, executed after %s", admitted, time.Since(up))
}

// The redial backoff, jitter included, stays under a second: an executor
// that comes up is dialled again within a second.
func TestRedialIsWithinASecond(t *testing.T) {
	if got := svc.MaxRedial(); got >= time.Second {
		t.Fatalf("the longest redial wait is %s", got)
	}
}

// forward accepts on lis and pipes each connection to addr.
func forward(lis net.Listener, addr string) {
	for {
		in, err := lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", addr)
		if err != nil {
			in.Close()
			continue
		}
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}
