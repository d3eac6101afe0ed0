// Command webhook-dispatcher delivers the payment notifications to each
// tenant's webhook endpoints as signed Standard Webhooks: it reads the
// notifications topic (one consumer group: it scales out by partition, like
// the audit-consumer), attempts each at once, records one row per
// delivery in the webhooks' database before committing the offset, and
// retries what failed, with per-endpoint caps held across dispatchers and
// no private addresses. docs/EVENTS.md, "Webhooks".
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/platform/svc"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "webhook-dispatcher", HTTPAddr: "127.0.0.1:9430", DatabaseFlag: "webhooks-database-url",
		DatabaseDefault: "postgres://postgres@127.0.0.1:55433/paysched_webhooks?sslmode=disable",
		DatabaseUsage:   "Postgres URL of the webhooks' database (migrate --webhooks-database-url; role paysched_webhooks)"})
	kafkaClient := kafkaauth.RegisterClient(cmd.FlagSet)
	group := cmd.String("group", tenanthook.Group, "consumer group")
	prefix := cmd.String("topic-prefix", kafka.DefaultPrefix, "cdc's --topic-prefix: the notifications are <prefix>.notifications")
	retention := cmd.Duration("retention", 30*24*time.Hour, "how long finished deliveries and their messages are kept (0: forever)")
	maxPending := cmd.Int("max-pending", 20000, "notifications read and not yet recorded at most (the fetch waits beyond)")
	timeout := cmd.Duration("timeout", 15*time.Second, "an attempt's time limit, response included")
	proxy := cmd.String("egress-proxy", "", "send every attempt through this HTTP proxy (e.g. smokescreen), which then refuses private addresses; empty: connect directly, refusing them here")
	loopback := cmd.Bool("allow-loopback", false, "let endpoints on 127.0.0.1 and ::1 (and http://) be reached: a local receiver in development; refused without --dev")
	schedule := cmd.String("retry-schedule", tenanthook.DefaultSchedule.String(), "the delays before each retry; their count is the retries a delivery gets (the spec's by default)")
	cmd.Main(func(ctx context.Context, log *slog.Logger) error {
		if *loopback && !cmd.Dev {
			return fmt.Errorf("--allow-loopback reaches local services: development only (--dev)")
		}
		if *prefix == "" {
			return fmt.Errorf("--topic-prefix must not be empty")
		}
		eg := tenanthook.Egress{Loopback: *loopback, Timeout: *timeout}
		if *proxy != "" {
			u, err := url.Parse(*proxy)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--egress-proxy %q: want http(s)://host:port", *proxy)
			}
			eg.Proxy = u
		}
		sched, err := tenanthook.ParseSchedule(*schedule)
		if err != nil {
			return fmt.Errorf("--retry-schedule: %w", err)
		}
		kafkaOpts, err := kafkaClient.OptsFor(cmd.Mode)
		if err != nil {
			return err
		}
		url := *cmd.DB
		cfg := tenanthook.Config{Brokers: kafkaClient.Brokers(), KafkaOpts: kafkaOpts, Group: *group,
			Topics: kafka.TopicsFor(*prefix), Egress: eg, Schedule: sched, Retention: *retention, MaxPending: *maxPending,
			// The slots across dispatchers are advisory locks on a session
			// of their own.
			Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }}
		if err := cfg.Validate(); err != nil {
			return err
		}
		return cmd.RunWorker(ctx, log, 8, func(d svc.Deps) (svc.Worker, error) {
			return tenanthook.New(cfg, d.Pool, d.Registry, log)
		}, svc.CustomPlans)
	})
}
