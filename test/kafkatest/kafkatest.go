// Package kafkatest starts an in-process Kafka-protocol cluster (franz-go's
// kfake) for tests that produce or consume.
package kafkatest

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
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

// Drain is kafka.Drain (kept here for the tests that use it).
func Drain(ctx context.Context, cl *kgo.Client, enough func() bool, fn func(*kgo.Record)) {
	kafka.Drain(ctx, cl, enough, fn)
}
