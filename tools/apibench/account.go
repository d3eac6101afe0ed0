package apibench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The three parts of a benchmark's CPU account: the product (paysched's
// services and the Postgres they use), the stand-ins for what a deployment
// gets from outside (gateway-sim for the PSP, kfake for the broker), and
// the harness (the load generator and watchers in this process, their
// queries in Postgres, and processes a script names "harness/...", such as
// webhook receivers).
const (
	PartProduct = "product"
	PartStandIn = "stand-ins"
	PartHarness = "harness"
)

// HarnessPrefix names a process of the harness in a --pids list
// ("harness/receiver-1=PID").
const HarnessPrefix = "harness/"

// selfName is this process's name in an account.
const selfName = HarnessPrefix + "paybench"

// standIns are the processes that stand in for a real PSP and broker.
var standIns = map[string]bool{"gateway-sim": true, "kafka": true}

// PartOf says which part of the account a CPU figure's name belongs to
// ("" for a breakdown of another figure: Postgres's parts).
func PartOf(name string) string {
	switch {
	case strings.HasPrefix(name, PGPart):
		return ""
	case name == BenchPG || strings.HasPrefix(name, HarnessPrefix):
		return PartHarness
	case standIns[name]:
		return PartStandIn
	}
	return PartProduct
}

// machineStat is the machine's CPU time by state, from /proc/stat's first
// line, in clock ticks.
type machineStat struct {
	user, nice, system, idle, iowait, irq, softirq, steal int64
}

func (s machineStat) total() int64 {
	return s.user + s.nice + s.system + s.idle + s.iowait + s.irq + s.softirq + s.steal
}

func readMachineStat() machineStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineStat{}
	}
	v := make([]int64, 8)
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	return machineStat{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
}

// Account is a benchmark's CPU in µs per payment (or per delivery), in
// its three parts, with each process's figure, and what the machine did
// meanwhile: idle and steal are shares of all its CPUs' time over the span.
type Account struct {
	Unit                       string // "payment" or "delivery"
	Product, StandIns, Harness float64
	ByName                     map[string]float64
	Idle, IOWait, Steal        float64
	CPUs                       int
	Span                       time.Duration
}

// accountMeter starts an account: this process's CPU and the machine's.
type accountMeter struct {
	at    time.Time
	self  time.Duration
	stat0 machineStat
}

func startAccount() accountMeter {
	self, _ := cpuTime(os.Getpid())
	return accountMeter{at: time.Now(), self: self, stat0: readMachineStat()}
}

// finish makes the account of used (each process's CPU since the start,
// cpuMeter.since's) over n units.
func (m accountMeter) finish(used map[string]time.Duration, n int, unit string) Account {
	a := Account{Unit: unit, ByName: map[string]float64{}, Span: time.Since(m.at)}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(max(n, 1)) }
	for name, d := range used {
		if PartOf(name) != "" {
			a.ByName[name] = per(d)
		}
	}
	if self, ok := cpuTime(os.Getpid()); ok {
		a.ByName[selfName] = per(self - m.self)
	}
	for name, us := range a.ByName {
		switch PartOf(name) {
		case PartProduct:
			a.Product += us
		case PartStandIn:
			a.StandIns += us
		case PartHarness:
			a.Harness += us
		}
	}
	s1 := readMachineStat()
	if dt := float64(s1.total() - m.stat0.total()); dt > 0 {
		a.Idle = float64(s1.idle-m.stat0.idle) / dt
		a.IOWait = float64(s1.iowait-m.stat0.iowait) / dt
		a.Steal = float64(s1.steal-m.stat0.steal) / dt
	}
	a.CPUs = cpus()
	return a
}

// cpus counts the machine's CPUs in /proc/stat.
func cpus() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu") && len(l) > 3 && l[3] >= '0' && l[3] <= '9' {
			n++
		}
	}
	return n
}

// String prints the account: one line per part with its processes, and
// one for the machine.
func (a Account) String() string {
	var b strings.Builder
	for _, part := range []struct {
		name  string
		total float64
	}{{PartProduct, a.Product}, {PartStandIn, a.StandIns}, {PartHarness, a.Harness}} {
		var names []string
		for n := range a.ByName {
			if PartOf(n) == part.name {
				names = append(names, n)
			}
		}
		sort.Slice(names, func(i, j int) bool { return a.ByName[names[i]] > a.ByName[names[j]] })
		parts := make([]string, len(names))
		for i, n := range names {
			label := strings.TrimPrefix(n, HarnessPrefix)
			if n == BenchPG {
				label = "its queries in postgres"
			}
			parts[i] = fmt.Sprintf("%s %.1f", label, a.ByName[n])
		}
		fmt.Fprintf(&b, "account %-9s %7.1f µs per %s (%s)\n", part.name, part.total, a.Unit, strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "account machine   %d cpus over %.1fs: idle %.1f%%, iowait %.1f%%, steal %.1f%%",
		a.CPUs, a.Span.Seconds(), 100*a.Idle, 100*a.IOWait, 100*a.Steal)
	return b.String()
}

// Fields is the account for a benchmark's last line.
func (a Account) Fields() string {
	return fmt.Sprintf("product_us=%.1f standins_us=%.1f harness_us=%.1f idle_pct=%.1f steal_pct=%.1f",
		a.Product, a.StandIns, a.Harness, 100*a.Idle, 100*a.Steal)
}

// Meter measures a span's CPU: each named process's and Postgres's (by
// backend, labelled by the pool's pg_stat_activity), this process's and
// the machine's, for an account.
type Meter struct {
	cpu  *cpuMeter
	acct accountMeter
}

// StartMeter starts measuring pids (name → pid) and Postgres; db labels
// Postgres's backends (nil: by process title).
func StartMeter(ctx context.Context, db *pgxpool.Pool, pids map[string]int) *Meter {
	var labels func() map[int]string
	if db != nil {
		labels = pgLabels(ctx, db)
	}
	return &Meter{cpu: newCPUMeter(pids, labels), acct: startAccount()}
}

// Account is the span's account over n units, with the CPU by name
// (Postgres's parts under PGPart) in µs per unit.
func (m *Meter) Account(n int, unit string) (Account, map[string]float64) {
	used := m.cpu.since()
	per := map[string]float64{}
	for name, d := range used {
		per[name] = float64(d.Microseconds()) / float64(max(n, 1))
	}
	return m.acct.finish(used, n, unit), per
}
