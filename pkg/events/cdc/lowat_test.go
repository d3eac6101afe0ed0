package cdc_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/kafkatest"
	"github.com/paysched/paysched/test/pgtest"
)

// TestQuietStreamIsReadPromptly: a lone change, far below the TCP
// replication socket's low-water mark, or between the paced reads of a Unix
// socket, still reaches Kafka within a poll or so, not at the next status
// report (10 s here).
func TestQuietStreamIsReadPromptly(t *testing.T) {
	for _, transport := range []string{"tcp", "unix"} {
		t.Run(transport, func(t *testing.T) {
			db := pgtest.NewPool(t)
			url := db.Config().ConnString()
			if transport == "unix" {
				url = socketURL(t, db)
			}
			seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Heartbeat)
			ctx := startConnectorAt(t, db, url, seeds, "quiet_slot", 10*time.Second, time.Minute)
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(kafka.DefaultTopics.Payments),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			st := store.NewStore(db)
			// The connector is streaming once a first change comes through.
			first := payment(time.Now().Add(time.Hour))
			if _, err := st.Create(ctx, []store.NewPayment{first}); err != nil {
				t.Fatal(err)
			}
			wait := func(within time.Duration) {
				t.Helper()
				pctx, pcancel := context.WithTimeout(ctx, within)
				defer pcancel()
				for {
					fs := cl.PollFetches(pctx)
					if fs.NumRecords() > 0 {
						return
					}
					if pctx.Err() != nil {
						t.Fatalf("no event within %v", within)
					}
				}
			}
			wait(30 * time.Second)
			for range 3 {
				start := time.Now()
				if _, err := st.Create(ctx, []store.NewPayment{payment(time.Now().Add(time.Hour))}); err != nil {
					t.Fatal(err)
				}
				wait(5 * time.Second)
				if d := time.Since(start); d > 2*time.Second {
					t.Fatalf("a lone change took %v to reach Kafka", d)
				}
			}
		})
	}
}

// socketURL is db's database over the cluster's Unix socket; the test is
// skipped where that socket cannot be reached.
func socketURL(t *testing.T, db *pgxpool.Pool) string {
	t.Helper()
	var dir string
	if err := db.QueryRow(context.Background(), "SHOW unix_socket_directories").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	cfg := db.Config().ConnConfig
	sock := fmt.Sprintf("%s/.s.PGSQL.%d", dir, cfg.Port)
	if _, err := os.Stat(sock); err != nil {
		t.Skipf("the cluster's Unix socket: %v", err)
	}
	return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d&sslmode=disable", cfg.User, cfg.Database, dir, cfg.Port)
}
