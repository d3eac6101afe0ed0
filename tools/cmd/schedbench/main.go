// Command schedbench measures the recurring schedules' planner (make
// bench-schedules): N monthly schedules across hundreds of zones, planned
// by several planners at once; it prints the figures and checks that
// every schedule's occurrence exists exactly once.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/paysched/paysched/tools/schedbench"
)

func main() {
	fs := flag.NewFlagSet("schedbench", flag.ExitOnError)
	cfg := schedbench.Config{Out: os.Stdout}
	fs.StringVar(&cfg.DatabaseURL, "database-url", "", "a migrated, empty database")
	fs.IntVar(&cfg.Schedules, "schedules", 1_000_000, "monthly schedules to plan")
	fs.IntVar(&cfg.Planners, "planners", 2, "planners at once (payments-api replicas)")
	fs.IntVar(&cfg.Batch, "batch", 2000, "schedules per planner pass (--planner-batch)")
	engine := fs.String("engine-per-s", "", "the engine's executed/s in the same run (make bench's), for the ratio")
	_ = fs.Parse(os.Args[1:])
	if cfg.DatabaseURL == "" {
		fmt.Fprintln(os.Stderr, "schedbench: --database-url is required")
		os.Exit(2)
	}
	res, err := schedbench.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schedbench:", err)
		os.Exit(1)
	}
	ratio := ""
	if e, err := strconv.ParseFloat(*engine, 64); err == nil && e > 0 {
		ratio = fmt.Sprintf(" planner_to_engine=%.2f", res.PlannedPerSecond()/e)
	}
	fmt.Printf("planner: %d schedules in %.1f s by %d planners (batch %d), %d occurrences made, planner CPU %.1f s (%.0f µs per schedule; Postgres apart)\n",
		res.Planned, res.Seconds, cfg.Planners, cfg.Batch, res.Made, res.CPUSeconds, 1e6*res.CPUSeconds/float64(max(res.Planned, 1)))
	fmt.Printf("schedules planned=%d planned_per_s=%.0f engine_per_s=%s duplicates=%d gaps=%d zones=%d%s\n",
		res.Planned, res.PlannedPerSecond(), orDash(*engine), res.Duplicates, res.Gaps, res.Zones, ratio)
	if res.Duplicates > 0 || res.Gaps > 0 {
		os.Exit(1)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
