package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/platform/config"
)

// eventsCmd is an example consumer of the notification stream.
func eventsCmd(g *globals) *cobra.Command {
	var brokers string
	var types []string
	var fromStart bool
	c := &cobra.Command{Use: "events", Short: "Notification events (CloudEvents on Kafka)"}
	kfs := flag.NewFlagSet("kafka", flag.ContinueOnError)
	sec := kafkaauth.Register(kfs)
	envErr := envDefaults(kfs)
	tail := &cobra.Command{
		Use:   "tail",
		Short: "Print notifications as they arrive (Ctrl-C to stop)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := kgo.NewOffset().AtEnd()
			if fromStart {
				start = kgo.NewOffset().AtStart()
			}
			if envErr != nil {
				return envErr
			}
			secOpts, err := sec.Opts()
			if err != nil {
				return err
			}
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...),
				kgo.ConsumeTopics(kafka.DefaultTopics.Notifications), kgo.ConsumeResetOffset(start)}, secOpts...)...)
			if err != nil {
				return fmt.Errorf("kafka client: %w", err)
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			want := map[string]bool{}
			for _, t := range types {
				want[t] = true
				want["paysched.payment."+t] = true
			}
			seen := map[string]bool{} // ce_id: redeliveries are dropped here
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				var failed error
				fs.EachError(func(_ string, _ int32, err error) {
					if ctx.Err() == nil {
						failed = err
					}
				})
				if failed != nil {
					return failed
				}
				fs.EachRecord(func(r *kgo.Record) {
					n, ok := notification.Decode(r)
					if !ok || (len(want) > 0 && !want[n.Type]) || seen[n.ID] {
						return
					}
					seen[n.ID] = true
					if g.json {
						fmt.Fprintf(g.out, `{"ce_id":%q,"ce_type":%q,"ce_time":%q,"ce_source":%q,"ce_tenant":%q,"data":%s}`+"\n",
							n.ID, n.Type, n.Time.UTC().Format(time.RFC3339Nano), n.Source, n.Tenant, n.Data)
						return
					}
					fmt.Fprintln(g.out, n)
				})
			}
			return nil
		},
	}
	tail.Flags().StringVar(&brokers, "kafka-brokers", env("kafka-brokers", "127.0.0.1:9092"), "Kafka brokers (env PAYSCHED_KAFKA_BROKERS)")
	tail.Flags().StringSliceVar(&types, "type", nil, "only these types: created, completed, failed, cancelled, dead_lettered (repeatable)")
	tail.Flags().BoolVar(&fromStart, "from-beginning", false, "start at the oldest notification, not the newest")
	tail.Flags().AddGoFlagSet(kfs)
	c.AddCommand(tail)
	return c
}

// envDefaults sets every flag of fs from its PAYSCHED_* variable, if set,
// and names it in the usage: cobra then parses the command line over
// these values, so a flag still wins. The first bad value is returned for
// the command to report (the value is a setting, never a secret: secrets
// are passed as files).
func envDefaults(fs *flag.FlagSet) error {
	var first error
	fs.VisitAll(func(f *flag.Flag) {
		name := config.EnvName(f.Name)
		f.Usage = fmt.Sprintf("%s (env %s)", f.Usage, name)
		if v, ok := os.LookupEnv(name); ok {
			if err := fs.Set(f.Name, v); err != nil && first == nil {
				first = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	return first
}
