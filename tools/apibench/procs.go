package apibench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// BenchPG names the Postgres CPU of the benchmark's own queries: shown
// beside the product's, never in its total.
const BenchPG = "bench/postgres"

// postgresProcs is the CPU time of each postgres process of the
// benchmark's clusters (every one on the machine without
// PAYSCHED_PG_POSTMASTER), by pid.
func postgresProcs() map[int]time.Duration {
	out := map[int]time.Duration{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	pms := postmasters()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		if len(pms) > 0 && !pms[pid] && !pms[parent(pid)] {
			continue // another cluster's (a test run beside the benchmark)
		}
		if t, ok := cpuTime(pid); ok {
			out[pid] = t
		}
	}
	return out
}

// postmasters are the benchmark's clusters' postmaster pids, from
// PAYSCHED_PG_POSTMASTER (deploy/local/with-pg.sh sets it, a comma list
// when the events' cluster runs beside the schedule's; empty: count every
// postgres process on the machine).
func postmasters() map[int]bool {
	out := map[int]bool{}
	for _, f := range strings.Split(os.Getenv("PAYSCHED_PG_POSTMASTER"), ",") {
		if pm, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && pm > 0 {
			out[pm] = true
		}
	}
	return out
}

// parent is a process's parent pid (0 when it is gone).
func parent(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
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
// Postgres, to account CPU per payment. Postgres is counted per process
// (a backend that starts during the run counts from zero; one that ends
// before the last sample is lost, never negative), in all ("postgres") and
// by what each process serves (PGPart + label: the walsender, each
// service's connections by application_name, autovacuum, the rest).
type cpuMeter struct {
	pids    map[string]int
	start   map[string]time.Duration
	pgStart map[int]time.Duration
	// labels names Postgres's backends by pid (pg_stat_activity's
	// application_name and database); nil: by process title.
	labels func() map[int]string
}

func newCPUMeter(pids map[string]int, labels func() map[int]string) *cpuMeter {
	m := &cpuMeter{pids: pids, start: map[string]time.Duration{}, pgStart: postgresProcs(), labels: labels}
	for name, pid := range pids {
		m.start[name], _ = cpuTime(pid)
	}
	return m
}

// since returns each process's CPU time since the meter started.
func (m *cpuMeter) since() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, pid := range m.pids {
		now, _ := cpuTime(pid)
		out[name] = now - m.start[name]
	}
	var labels map[int]string
	if m.labels != nil {
		labels = m.labels()
	}
	for pid, now := range postgresProcs() {
		d := now - m.pgStart[pid]
		if d < 0 {
			d = now // a new process under a reused pid
		}
		kind := pgKind(pid)
		if l, ok := labels[pid]; ok && strings.HasPrefix(kind, "db ") {
			kind = l
		}
		if strings.HasPrefix(kind, "paybench ") {
			// The benchmark's own queries (its drain probe, its counts): the
			// measurement's, not the product's.
			out[BenchPG] += d
			continue
		}
		out["postgres"] += d
		out[PGPart+kind] += d
	}
	return out
}

// pgLabels names each backend of db's cluster by its application_name and
// database, for cpuMeter.
func pgLabels(ctx context.Context, db *pgxpool.Pool) func() map[int]string {
	return func() map[int]string {
		out := map[int]string{}
		rows, err := db.Query(ctx, `SELECT pid, COALESCE(NULLIF(application_name, ''), '?'), COALESCE(datname, '') FROM pg_stat_activity WHERE backend_type = 'client backend'`)
		if err != nil {
			return out
		}
		var pid int
		var app, dbname string
		_, _ = pgx.ForEachRow(rows, []any{&pid, &app, &dbname}, func() error {
			out[pid] = app + " (" + dbname + ")"
			return nil
		})
		return out
	}
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
