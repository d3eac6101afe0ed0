// Command kafka is the local stack's Kafka: an in-process Kafka-protocol
// broker (franz-go's kfake) on 127.0.0.1, persistent in its data directory.
// Real deployments use real Kafka.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/paysched/paysched/pkg/config"
	"github.com/paysched/paysched/pkg/kafka"
	"github.com/paysched/paysched/pkg/obs"
	"github.com/paysched/paysched/pkg/svc"
)

func main() {
	fs := flag.NewFlagSet("kafka", flag.ExitOnError)
	port := fs.Int("kafka-port", 9092, "listen port (127.0.0.1)")
	dir := fs.String("kafka-data-dir", ".data/kafka", "data directory (kept across restarts)")
	httpAddr := fs.String("http-addr", "127.0.0.1:9093", "metrics and health listen address")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(2)
	}
	log := obs.Logger("kafka")
	ctx, stop := svc.Context()
	defer stop()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		svc.Fatal(log, err)
	}
	b, err := kafka.StartBroker(*port, *dir)
	if err != nil {
		svc.Fatal(log, err)
	}
	defer b.Close()
	log.Info("kafka listening", "addrs", b.Addrs(), "data_dir", *dir)
	if err := (svc.Server{Name: "kafka", Log: log, Registry: obs.Registry(), HTTPAddr: *httpAddr}).Run(ctx, nil); err != nil {
		svc.Fatal(log, err)
	}
}
