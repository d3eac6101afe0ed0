// Package kafka holds paysched's Kafka conventions (topic names and
// partition counts) and the local broker built on franz-go's kfake.
package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"
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
