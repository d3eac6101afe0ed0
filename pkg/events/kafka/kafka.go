// Package kafka holds paysched's Kafka conventions: topic names and
// partition counts, producer compression, the client's logger, and a
// draining reader. The local broker is a tool (tools/localkafka).
package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Topics names every topic of one deployment. All derive from one name,
// the Debezium logical server name (the prefix): change events go to
// <prefix>.<schema>.<table>, heartbeats to __debezium-heartbeat.<prefix>,
// notifications to <prefix>.notifications. cdc and the audit-consumer take
// the prefix as --topic-prefix; every other reader uses DefaultTopics.
type Topics struct {
	Prefix   string
	Payments string
	Attempts string
	Actions  string
	// ScheduleEvents carries recurring schedules' lives (created, paused,
	// resumed, ended, cancelled, updated).
	ScheduleEvents string
	Notifications  string
	Heartbeat      string
}

// DefaultPrefix is the logical server name of the local stack and of the
// deployment manifests.
const DefaultPrefix = "paysched"

// TopicsFor names the topics of the logical server prefix.
func TopicsFor(prefix string) Topics {
	return Topics{
		Prefix:         prefix,
		Payments:       ChangeTopic(prefix, "public", "payments"),
		Attempts:       ChangeTopic(prefix, "public", "payment_attempts"),
		Actions:        ChangeTopic(prefix, "public", "payment_actions"),
		ScheduleEvents: ChangeTopic(prefix, "public", "schedule_events"),
		Notifications:  prefix + ".notifications",
		Heartbeat:      "__debezium-heartbeat." + prefix,
	}
}

// DefaultTopics is TopicsFor(DefaultPrefix).
var DefaultTopics = TopicsFor(DefaultPrefix)

// ChangeTopic is Debezium's topic of a captured table: <prefix>.<schema>.<table>.
func ChangeTopic(prefix, schema, table string) string { return prefix + "." + schema + "." + table }

// Partitions is each topic's partition count (the local broker creates
// them so; the Strimzi KafkaTopics declare the same). Change events are
// keyed by payment, so partitions bound the consumers' parallelism, not
// ordering.
func (t Topics) Partitions() map[string]int32 {
	return map[string]int32{t.Payments: 6, t.Attempts: 6, t.Actions: 3, t.ScheduleEvents: 3, t.Notifications: 6, t.Heartbeat: 1}
}

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
