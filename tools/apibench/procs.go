package apibench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTick is the kernel's USER_HZ: /proc times are in these.
const clockTick = 10 * time.Millisecond

// cpuTime is the user+system CPU a process has used so far (false when it
// is gone or a zombie).
func cpuTime(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces: fields count from the
	// closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * clockTick, true
}

// PGPart prefixes the names of the parts of Postgres's CPU (postgres/...):
// a breakdown of the "postgres" figure, never added to a total.
const PGPart = "postgres/"

// postgresCPU sums the CPU time of every postgres process on the machine
// (the benchmark's private cluster is the only one running), in all and
// by kind: the walsender (logical decoding for cdc), the backends of each
// database (the engine's statements in one, the audit log's writes in
// the other), autovacuum, and the rest (checkpointer, WAL writer...).
func postgresCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		t, ok := cpuTime(pid)
		if !ok {
			continue
		}
		out["postgres"] += t
		out[PGPart+pgKind(pid)] += t
	}
	return out
}

// pgKind names a postgres process by its title ("postgres: walsender ...",
// "postgres: <user> <database> <client> <state>", "postgres: checkpointer").
func pgKind(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "other"
	}
	f := strings.Fields(strings.ReplaceAll(string(b), "\x00", " "))
	switch {
	case len(f) < 2 || f[0] != "postgres:":
		return "other"
	case f[1] == "walsender":
		return "walsender"
	case f[1] == "autovacuum":
		return "autovacuum"
	case len(f) >= 4 && !strings.HasSuffix(f[1], "process") && f[1] != "logical" && f[1] != "background":
		// A backend: user, database, client.
		return "db " + f[2]
	}
	return "other"
}

// cpuMeter samples the CPU time of the benchmark's processes and of
// Postgres, to account CPU per payment.
type cpuMeter struct {
	pids  map[string]int
	start map[string]time.Duration
}

func newCPUMeter(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: m0(pids)}
	return m
}

func m0(pids map[string]int) map[string]time.Duration {
	out := postgresCPU()
	for name, pid := range pids {
		out[name], _ = cpuTime(pid)
	}
	return out
}

// since returns each process's CPU time since the meter started.
func (m *cpuMeter) since() map[string]time.Duration {
	now := m0(m.pids)
	out := map[string]time.Duration{}
	for k, v := range now {
		out[k] = v - m.start[k]
	}
	return out
}

// watchdog notices a benchmark process that exits: a run whose engine lost
// a process must fail at once, not wait for a drain that never comes.
type watchdog struct {
	mu   sync.Mutex
	err  error
	stop chan struct{}
}

func watch(pids map[string]int, logs map[string]string) *watchdog {
	w := &watchdog{stop: make(chan struct{})}
	go func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			for name, pid := range pids {
				if _, ok := cpuTime(pid); !ok {
					w.mu.Lock()
					w.err = fmt.Errorf("process %s (pid %d) exited during the benchmark%s", name, pid, lastLines(logs[name], 15))
					w.mu.Unlock()
					return
				}
			}
		}
	}()
	return w
}

// failed reports the first process that exited, if any.
func (w *watchdog) failed() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *watchdog) close() {
	if w != nil {
		close(w.stop)
	}
}

// lastLines is the tail of a log file, for an error message.
func lastLines(path string, n int) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "; last lines of " + path + ":\n" + strings.Join(lines, "\n")
}
