// Package chaos is `make chaos`: the full local topology under fire (kill -9
// of random processes, a Postgres restart, a Kafka restart, a SIGTERM of a
// whole tier) while a workload of payments, racing cancels and duplicate
// creates runs; then it checks every money and event invariant.
package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one supervised service process: like a container under an
// orchestrator, it is restarted whenever it exits unless it was stopped.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string
	tier string // executor, sweeper, ...: what a tier-wide SIGTERM hits

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopped  bool   // by the driver: do not restart
	restarts int    // exits the driver did not cause
	lastExit string // how the last of them ended
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked()
}

func (p *proc) startLocked() error {
	// Two drivers may kill and restart one process at once (the random
	// kills and the webhook chaos): the second start finds the first's
	// process running and leaves it (a second process would fail to bind,
	// and the first would outlive the run, unsupervised).
	if p.running() {
		p.stopped = false
		return nil
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(hermetic(os.Environ()), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own group (a kill reaches its children too), and killed with
	// the run: a run that is itself killed leaves no service holding the
	// next run's ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.stopped = cmd, exited, false
	go func() {
		werr := cmd.Wait()
		f.Close()
		close(exited)
		p.mu.Lock()
		restart := !p.stopped && p.cmd == cmd
		if restart {
			p.restarts++
			p.lastExit = fmt.Sprint(werr)
		}
		p.mu.Unlock()
		if restart {
			// Crashed or gave up on its own (e.g. cdc losing Postgres): the
			// supervisor brings it back, like a Deployment would.
			time.Sleep(500 * time.Millisecond)
			p.mu.Lock()
			if !p.stopped && p.cmd == cmd {
				_ = p.startLocked()
			}
			p.mu.Unlock()
		}
	}()
	return nil
}

// running says whether the last process started has not exited; p.mu is
// held.
func (p *proc) running() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig and waits (bounded) for the exit; the process stays down
// until start.
func (p *proc) signal(sig syscall.Signal, wait time.Duration) {
	p.mu.Lock()
	p.stopped = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// kill9 is kill -9 followed by a restart after pause.
func (p *proc) kill9(pause time.Duration) error {
	p.signal(syscall.SIGKILL, 5*time.Second)
	time.Sleep(pause)
	return p.start()
}

func newProc(dir, name, tier, bin string, env []string, args ...string) *proc {
	return &proc{name: name, tier: tier, bin: bin, args: args, env: env, log: filepath.Join(dir, name+".log")}
}

// hermetic drops the caller's PAYSCHED_* settings (a shell that sourced the
// local stack's .data/env, say): the run's services take theirs from the
// run alone, or a stack's secret would make them refuse the run's tokens.
func hermetic(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PAYSCHED_") {
			out = append(out, kv)
		}
	}
	return out
}
