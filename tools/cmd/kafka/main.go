// Command kafka is the local stack's Kafka: an in-process Kafka-protocol
// broker (franz-go's kfake) on 127.0.0.1, persistent in its data directory.
// Real deployments use real Kafka.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/tools/localkafka"
)

func main() {
	fs := flag.NewFlagSet("kafka", flag.ExitOnError)
	port := fs.Int("kafka-port", 9092, "listen port (127.0.0.1)")
	dir := fs.String("kafka-data-dir", ".data/kafka", "data directory (kept across restarts)")
	httpAddr := fs.String("http-addr", "127.0.0.1:9093", "metrics and health listen address")
	svc.Main("kafka", fs, func(ctx context.Context, log *slog.Logger) error {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			return fmt.Errorf("--kafka-data-dir: %w", err)
		}
		b, err := localkafka.Start(*port, *dir, kafka.DefaultTopics)
		if err != nil {
			return err
		}
		defer b.Close()
		log.Info("kafka listening", "addrs", b.Addrs(), "data_dir", *dir)
		return svc.Server{Name: "kafka", Log: log, Registry: obs.Registry(), HTTPAddr: *httpAddr}.Run(ctx, nil)
	})
}
