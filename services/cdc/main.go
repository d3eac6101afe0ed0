// Command cdc is the Debezium-style connector: Postgres logical replication
// (pgoutput, a permanent slot) into Kafka as Debezium JSON envelopes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/events/cdc"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/svc"
)

func main() {
	fs := flag.NewFlagSet("cdc", flag.ExitOnError)
	base := config.RegisterService(fs, "database-url", config.LocalDatabaseURL, "Postgres URL")
	kafkaClient := kafkaauth.RegisterClient(fs)
	slot := fs.String("slot", "paysched_cdc", "replication slot (permanent)")
	pub := fs.String("publication", "paysched", "publication")
	prefix := fs.String("topic-prefix", kafka.DefaultPrefix, "Debezium logical server name: topics are <prefix>.<schema>.<table>")
	httpAddr := fs.String("http-addr", "127.0.0.1:9400", "metrics and health listen address")
	status := fs.Duration("status-interval", time.Second, "how often the acknowledged LSN is reported to Postgres")
	compression := fs.String("kafka-compression", "snappy", "producer batch compression: none, gzip, snappy, lz4 or zstd")
	announced := fs.Bool("announced-attempts", true, "derive the change events of attempt rows that their outcome's payment change announces (the publication leaves those rows out: one change fewer per payment); false: publish every attempt row itself, as before schema 15")
	binaryMode := fs.Bool("pgoutput-binary", true, "read pgoutput's binary form of each column (the walsender skips every column's output function); false: its text form")
	resync := fs.Bool("resync", false, "when the replication slot is missing or does not continue from the last position cdc confirmed (a failover, a dropped slot), recreate it and emit snapshot events (op r) for the rows changed since then; without it cdc refuses to start")
	failover := fs.Bool("slot-failover", true, "make the slot a failover slot on PostgreSQL 17 and later (CREATE or ALTER with FAILOVER), so standbys running sync_replication_slots keep it across a failover")
	schemas := fs.Bool("envelope-schemas", false, "write keys and envelopes in the schema-ful form ({\"schema\":...,\"payload\":...}), as Debezium's JsonConverter does with schemas.enable=true (for sinks that need it; the audit-consumer reads both)")
	beat := fs.Duration("heartbeat-interval", 10*time.Second, "heartbeat write and event interval")
	svc.Main("cdc", fs, func(ctx context.Context, log *slog.Logger) error {
		if err := base.Start(log); err != nil {
			return err
		}
		if err := kafkaClient.ValidateFor(base.Mode); err != nil {
			return err
		}
		pcfg, err := pgx.ParseConfig(*base.DB)
		if err != nil {
			return fmt.Errorf("--database-url: %w", err)
		}
		codec, err := kafka.Compression(*compression)
		if err != nil {
			return fmt.Errorf("--kafka-compression: %w", err)
		}
		// Before anything connects: a missing password or CA file stops
		// the service here, naming the flag.
		kafkaOpts, err := kafkaClient.Opts()
		if err != nil {
			return err
		}
		cfg := cdc.Config{KafkaOpts: kafkaOpts, DatabaseURL: *base.DB, Slot: *slot, Publication: *pub,
			Source: envelope.Source{Name: *prefix, DB: pcfg.Database}, Brokers: kafkaClient.Brokers(), Compression: codec,
			HeartbeatTopic: kafka.TopicsFor(*prefix).Heartbeat, StatusInterval: *status, HeartbeatInterval: *beat, Schemas: *schemas, Resync: *resync, Failover: *failover, Text: !*binaryMode, PublishAttempts: !*announced}
		if err := cfg.Validate(); err != nil {
			return err
		}
		return svc.WorkerService{Name: "cdc", Log: log, DatabaseURL: *base.DB, MaxConns: 4, HTTPAddr: *httpAddr}.Run(ctx,
			func(d svc.Deps) (svc.Worker, error) {
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
