// Command chaos is `make chaos`: the full local topology under kill -9,
// a Postgres restart, a Kafka restart and a tier-wide SIGTERM while
// payments fall due (and the webhook-dispatcher and receivers are killed
// in turn), then every money, event and webhook invariant is checked. The
// line before the last is `chaos webhooks endpoints=<n> expected=<n>
// delivered=<n> duplicates=<n> lost=<n>`; the last line is `chaos payments=<n> kills=<n> double_charged=<n> stuck=<n>
// lost_events=<n> violations=<n>`; it exits 1 on any violation.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/tools/chaos"
)

func main() {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	cfg := chaos.Config{Out: os.Stdout}
	fs.StringVar(&cfg.Bin, "bin", "bin", "directory of the service binaries")
	fs.StringVar(&cfg.Dir, "dir", ".data/chaos", "logs and kafka data")
	fs.StringVar(&cfg.PGScript, "pg-script", "deploy/local/pg.sh", "pg.sh, to restart Postgres")
	fs.StringVar(&cfg.PGDir, "pg-dir", "", "the cluster's directory (pg.sh start DIR PORT)")
	fs.IntVar(&cfg.PGPort, "pg-port", 0, "the cluster's port")
	fs.IntVar(&cfg.EventsPGPort, "events-pg-port", 0, "the events' cluster's port (the audit log and the webhooks; 0: the same cluster)")
	fs.IntVar(&cfg.Base, "base-port", 21000, "service ports are offsets from it")
	fs.IntVar(&cfg.Payments, "payments", 20000, "payments to schedule")
	fs.DurationVar(&cfg.Spread, "spread", 2*time.Minute, "they fall due evenly over this")
	fs.DurationVar(&cfg.Lead, "lead", 15*time.Second, "the first falls due this long after the start")
	fs.DurationVar(&cfg.KillMin, "kill-min", 3*time.Second, "shortest pause between kills")
	fs.DurationVar(&cfg.KillMax, "kill-max", 10*time.Second, "longest pause between kills")
	fs.DurationVar(&cfg.Settle, "settle", 3*time.Minute, "longest wait for every payment to end after the chaos")
	fs.BoolVar(&cfg.Resync, "resync", false, "lose cdc's replication slot once (stop cdc, drop the slot) and bring cdc back with --resync")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if cfg.PGDir == "" || cfg.PGPort == 0 {
		fmt.Fprintln(os.Stderr, "chaos: --pg-dir and --pg-port are required (deploy/local/chaos.sh sets them)")
		os.Exit(2)
	}
	res, err := chaos.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		res.Violations++
	}
	fmt.Println(res.Webhooks)
	fmt.Println(res)
	if res.Violations > 0 {
		os.Exit(1)
	}
}
