// Command cdc is the Debezium-style connector: Postgres logical replication
// (pgoutput, a permanent slot) into Kafka as Debezium JSON envelopes.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/events/cdc"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/platform/svc"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "cdc", HTTPAddr: "127.0.0.1:9400"})
	kafkaClient := kafkaauth.RegisterClient(cmd.FlagSet)
	slot := cmd.String("slot", "paysched_cdc", "replication slot (permanent)")
	pub := cmd.String("publication", "paysched", "publication")
	prefix := cmd.String("topic-prefix", kafka.DefaultPrefix, "Debezium logical server name: topics are <prefix>.<schema>.<table>")
	status := cmd.Duration("status-interval", time.Second, "how often the acknowledged LSN is reported to Postgres")
	compression := cmd.String("kafka-compression", "snappy", "producer batch compression: none, gzip, snappy, lz4 or zstd")
	announced := cmd.Bool("announced-attempts", true, "derive the change events of attempt rows that their outcome's payment change announces (the publication leaves those rows out: one change fewer per payment); false: publish every attempt row itself, as before schema 15")
	binaryMode := cmd.Bool("pgoutput-binary", true, "read pgoutput's binary form of each column (the walsender skips every column's output function); false: its text form")
	resync := cmd.Bool("resync", false, "when the replication slot is missing or does not continue from the last position cdc confirmed (a failover, a dropped slot), recreate it and emit snapshot events (op r) for the rows changed since then; without it cdc refuses to start")
	failover := cmd.Bool("slot-failover", true, "make the slot a failover slot on PostgreSQL 17 and later (CREATE or ALTER with FAILOVER), so standbys running sync_replication_slots keep it across a failover")
	schemas := cmd.Bool("envelope-schemas", false, "write keys and envelopes in the schema-ful form ({\"schema\":...,\"payload\":...}), as Debezium's JsonConverter does with schemas.enable=true (for sinks that need it; the audit-consumer reads both)")
	beat := cmd.Duration("heartbeat-interval", 10*time.Second, "heartbeat write and event interval")
	cmd.Main(func(ctx context.Context, log *slog.Logger) error {
		pcfg, err := pgx.ParseConfig(*cmd.DB)
		if err != nil {
			return fmt.Errorf("--database-url: %w", err)
		}
		codec, err := kafka.Compression(*compression)
		if err != nil {
			return fmt.Errorf("--kafka-compression: %w", err)
		}
		kafkaOpts, err := kafkaClient.OptsFor(cmd.Mode)
		if err != nil {
			return err
		}
		cfg := cdc.Config{KafkaOpts: kafkaOpts, DatabaseURL: *cmd.DB, Slot: *slot, Publication: *pub,
			Source: envelope.Source{Name: *prefix, DB: pcfg.Database}, Brokers: kafkaClient.Brokers(), Compression: codec,
			HeartbeatTopic: kafka.TopicsFor(*prefix).Heartbeat, StatusInterval: *status, HeartbeatInterval: *beat, Schemas: *schemas, Resync: *resync, Failover: *failover, Text: !*binaryMode, PublishAttempts: !*announced}
		if err := cfg.Validate(); err != nil {
			return err
		}
		return cmd.RunWorker(ctx, log, 4, func(d svc.Deps) (svc.Worker, error) {
			c, err := cdc.New(cfg, d.Pool, d.Registry, log)
			if err != nil {
				return nil, err
			}
			if err := c.Setup(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		})
	})
}
