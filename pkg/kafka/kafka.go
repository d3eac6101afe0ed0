// Package kafka holds paysched's Kafka conventions (topic names and
// partition counts) and the local broker built on franz-go's kfake.
package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topics and their partition counts. Change events are keyed by payment, so
// partitions bound the consumers' parallelism, not ordering.
const (
	TopicPayments      = "paysched.public.payments"
	TopicAttempts      = "paysched.public.payment_attempts"
	TopicActions       = "paysched.public.payment_actions"
	TopicNotifications = "paysched.notifications"
	TopicHeartbeat     = "__debezium-heartbeat.paysched"
)

// Partitions of each topic the local broker creates.
var Partitions = map[string]int32{
	TopicPayments: 6, TopicAttempts: 6, TopicActions: 3, TopicNotifications: 6, TopicHeartbeat: 1,
}

// Broker is the local Kafka-protocol broker (kfake), persistent in dataDir.
type Broker struct{ c *kfake.Cluster }

// StartBroker listens on port (127.0.0.1) and keeps data under dataDir, so
// topics and records survive restarts.
func StartBroker(port int, dataDir string) (*Broker, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dataDir),
		kfake.DefaultNumPartitions(6))
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	for t, n := range Partitions {
		// Exists already after a restart: that is fine.
		_ = c.CreateTopic(t, n, nil)
	}
	return &Broker{c: c}, nil
}

// Addrs are the listen addresses.
func (b *Broker) Addrs() []string { return b.c.ListenAddrs() }

// Close stops the broker, flushing its data directory.
func (b *Broker) Close() { b.c.Close() }

// Drain polls cl and hands every record to fn until three polls in a row
// (a second each) bring nothing and enough() agrees (nil: no condition).
func Drain(ctx context.Context, cl *kgo.Client, enough func() bool, fn func(*kgo.Record)) {
	for quiet := 0; quiet < 3 && ctx.Err() == nil; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			fn(r)
		})
		if n == 0 && (enough == nil || enough()) {
			quiet++
		}
	}
}

// ClientLogger makes the Kafka client's warnings and errors (a broker gone,
// a group join failing, a producer id reset) part of the service's log.
func ClientLogger(log *slog.Logger) kgo.Logger {
	return clientLogger{log.With("component", "kafka-client")}
}

type clientLogger struct{ log *slog.Logger }

func (clientLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l clientLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	l.log.Log(context.Background(), lv, msg, keyvals...)
}

// Compression names a producer batch codec: none, gzip, snappy, lz4 or zstd.
// paysched's producers default to snappy (franz-go's default): with the
// local broker it made the CDC spike faster than none (8,369 against 7,673
// executed/s, medians of 3, `make bench CDC=1`), since every byte is also
// written to the broker's log and read back by the audit-consumer.
func Compression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none", "":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("kafka compression %q: want none, gzip, snappy, lz4 or zstd", name)
}
