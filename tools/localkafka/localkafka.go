// Package localkafka is the local stack's Kafka: an in-process
// Kafka-protocol broker (franz-go's kfake), persistent in a data directory.
// It is a tool: real deployments use real Kafka, and no product binary
// links it.
package localkafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/paysched/paysched/pkg/events/kafka"
)

// Broker is the local Kafka-protocol broker (kfake), persistent in dataDir.
type Broker struct{ c *kfake.Cluster }

// Start listens on port (127.0.0.1) and keeps data under dataDir, so
// topics and records survive restarts.
func Start(port int, dataDir string, topics kafka.Topics) (*Broker, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dataDir),
		kfake.DefaultNumPartitions(6))
	if err != nil {
		return nil, fmt.Errorf("start kafka: %w", err)
	}
	for t, n := range topics.Partitions() {
		// Exists already after a restart: that is fine.
		_ = c.CreateTopic(t, n, nil)
	}
	return &Broker{c: c}, nil
}

// Addrs are the listen addresses.
func (b *Broker) Addrs() []string { return b.c.ListenAddrs() }

// Close stops the broker, flushing its data directory.
func (b *Broker) Close() { b.c.Close() }
