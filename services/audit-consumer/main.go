// Command audit-consumer turns the CDC topics into the append-only audit log
// and the CloudEvents notification stream. The audit log lives in a
// database of its own (--audit-database-url): Postgres's logical decoding
// then skips its writes instead of decoding them beside the schedule's
// (docs/DESIGN.md, "Where the audit log lives").
package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/paysched/paysched/pkg/events/audit"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "audit-consumer", HTTPAddr: "127.0.0.1:9410",
		DatabaseUsage: "Postgres URL of the schedule (read: is the engine behind?)"})
	auditURL := cmd.String("audit-database-url", "", "Postgres URL of the audit log's database, where audit_events is written (migrate --audit-database-url makes it); required outside --dev, where empty means the schedule's own database")
	kafkaClient := kafkaauth.RegisterClient(cmd.FlagSet)
	group := cmd.String("group", kafka.AuditGroup, "consumer group")
	prefix := cmd.String("topic-prefix", kafka.DefaultPrefix, "cdc's --topic-prefix: topics are <prefix>.<schema>.<table>, notifications <prefix>.notifications")
	compression := cmd.String("kafka-compression", "snappy", "notifications' batch compression: none, gzip, snappy, lz4 or zstd")
	streams := cmd.Int("write-streams", 2, "COPY streams writing each batch of audit rows at once: more drain a backlog (a spike's, see --max-defer) faster while Postgres has idle cores")
	maxDefer := cmd.Duration("max-defer", 2*time.Minute, "while payments are overdue by a real backlog (--backlog: the engine is behind a due-time spike), hold audit writes back for up to this long after their change committed, so that Postgres spends its CPU on the payments (a spike that outlasts it is executed ~40% slower from then on); notifications are never held; 0 never holds back")
	backlog := cmd.Duration("backlog", 5*time.Second, "how late the oldest unclaimed payment must be for the audit writes to be held back (--max-defer)")
	cmd.Main(func(ctx context.Context, log *slog.Logger) error {
		if err := cmd.Require(*auditURL != "" && *auditURL != *cmd.DB,
			fmt.Errorf("--audit-database-url is not set apart: production writes the audit log to a database of its own, never the schedule's")); err != nil {
			return err
		}
		if *auditURL != "" {
			if err := cmd.DatabaseURL("--audit-database-url", *auditURL); err != nil {
				return err
			}
		}
		codec, err := kafka.Compression(*compression)
		if err != nil {
			return fmt.Errorf("--kafka-compression: %w", err)
		}
		if *prefix == "" {
			return fmt.Errorf("--topic-prefix must not be empty")
		}
		kafkaOpts, err := kafkaClient.OptsFor(cmd.Mode)
		if err != nil {
			return err
		}
		cfg := audit.Config{KafkaOpts: kafkaOpts, Brokers: kafkaClient.Brokers(), Group: *group, Compression: codec, WriteStreams: *streams,
			MaxDefer: *maxDefer, Backlog: *backlog, Topics: kafka.TopicsFor(*prefix)}
		if err := cfg.Validate(); err != nil {
			return err
		}
		apart := *auditURL != "" && *auditURL != *cmd.DB
		conns := max(4, *streams)
		if apart {
			conns = 2 // the overdue check only
		}
		pool, err := svc.Pool(ctx, *cmd.DB, conns, svc.CustomPlans)
		if err != nil {
			return err
		}
		defer pool.Close()
		logPool := pool
		if apart {
			if logPool, err = svc.Pool(ctx, *auditURL, max(4, *streams), svc.CustomPlans); err != nil {
				return fmt.Errorf("--audit-database-url: %w", err)
			}
			defer logPool.Close()
		} else {
			log.Warn("the audit log shares the schedule's database: its writes are decoded by the CDC slot beside the payments' (set --audit-database-url)")
		}
		ready := func(ctx context.Context) error {
			if err := pool.Ping(ctx); err != nil {
				return err
			}
			return logPool.Ping(ctx)
		}
		reg := obs.Registry()
		c, err := audit.New(cfg, pool, logPool, reg, log)
		if err != nil {
			return err
		}
		defer c.Close()
		return svc.Server{Name: "audit-consumer", Log: log, Registry: reg, HTTPAddr: *cmd.HTTPAddr, Ready: ready}.Run(ctx, c.Run)
	})
}
