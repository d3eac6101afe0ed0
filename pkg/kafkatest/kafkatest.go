// Package kafkatest starts an in-process Kafka-protocol cluster (franz-go's
// kfake) for tests that produce or consume.
package kafkatest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// NewCluster starts a one-broker cluster with topics (3 partitions each)
// and returns its seed addresses; it is closed when the test ends.
func NewCluster(t testing.TB, topics ...string) []string {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(3)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(3, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
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
