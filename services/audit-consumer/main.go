// Command audit-consumer turns the CDC topics into the append-only audit log
// and the CloudEvents notification stream.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/paysched/paysched/pkg/events/audit"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
)

func main() {
	fs := flag.NewFlagSet("audit-consumer", flag.ExitOnError)
	mode := config.RegisterMode(fs)
	dbURL := fs.String("database-url", "postgres://postgres@127.0.0.1:55432/paysched?sslmode=disable", "Postgres URL")
	brokers := fs.String("kafka-brokers", "127.0.0.1:9092", "Kafka seed brokers, comma separated")
	kafkaSec := kafkaauth.Register(fs)
	group := fs.String("group", kafka.AuditGroup, "consumer group")
	prefix := fs.String("topic-prefix", kafka.DefaultPrefix, "cdc's --topic-prefix: topics are <prefix>.<schema>.<table>, notifications <prefix>.notifications")
	compression := fs.String("kafka-compression", "snappy", "notifications' batch compression: none, gzip, snappy, lz4 or zstd")
	streams := fs.Int("write-streams", 2, "COPY streams writing each batch of audit rows at once: more drain a backlog (a spike's, see --max-defer) faster while Postgres has idle cores")
	maxDefer := fs.Duration("max-defer", 30*time.Second, "while payments are overdue (the engine is behind a due-time spike), hold audit writes and notifications back for up to this long after their change committed, so that Postgres spends its CPU on the payments; 0 never holds back")
	httpAddr := fs.String("http-addr", "127.0.0.1:9410", "metrics and health listen address")
	svc.Main("audit-consumer", fs, func(ctx context.Context, log *slog.Logger) error {
		mode.Announce(log)
		if err := mode.DatabaseURL("--database-url", *dbURL); err != nil {
			return err
		}
		if err := kafkaSec.ValidateFor(mode); err != nil {
			return err
		}
		codec, err := kafka.Compression(*compression)
		if err != nil {
			return fmt.Errorf("--kafka-compression: %w", err)
		}
		if *prefix == "" {
			return fmt.Errorf("--topic-prefix must not be empty")
		}
		// Before anything connects: a missing password or CA file stops
		// the service here, naming the flag.
		kafkaOpts, err := kafkaSec.Opts()
		if err != nil {
			return err
		}
		cfg := audit.Config{KafkaOpts: kafkaOpts, Brokers: strings.Split(*brokers, ","), Group: *group, Compression: codec, WriteStreams: *streams,
			MaxDefer: *maxDefer, Topics: kafka.TopicsFor(*prefix)}
		if err := cfg.Validate(); err != nil {
			return err
		}
		pool, err := svc.Pool(ctx, *dbURL, max(4, *streams), svc.CustomPlans)
		if err != nil {
			return err
		}
		defer pool.Close()
		reg := obs.Registry()
		c, err := audit.New(cfg, pool, reg, log)
		if err != nil {
			return err
		}
		defer c.Close()
		return svc.Server{Name: "audit-consumer", Log: log, Registry: reg, HTTPAddr: *httpAddr, Ready: pool.Ping}.Run(ctx, c.Run)
	})
}
