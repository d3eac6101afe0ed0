package audit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/kafka"
	"github.com/paysched/paysched/pkg/kafkatest"
	"github.com/paysched/paysched/pkg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// change is the envelope of payment id's change at lsn to status.
func change(lsn int, id, status string) *kgo.Record {
	return &kgo.Record{Topic: kafka.TopicPayments, Key: []byte(`{"id":"` + id + `"}`), Value: []byte(fmt.Sprintf(
		`{"before":null,"after":{"id":%q,"status":%q,"amount_minor":100},"source":{"table":"payments","lsn":%d,"ts_ms":%d},"op":"c","ts_ms":0}`,
		id, status, lsn, time.Now().UnixMilli()))}
}

func paymentUUID(i int) string { return fmt.Sprintf("00000000-0000-7000-8000-%012d", i) }

func newConsumer(t *testing.T, db *pgxpool.Pool, seeds []string) *Consumer {
	t.Helper()
	c, err := New(Config{Brokers: seeds, Group: "audit"}, db, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A batch that repeats changes already written (a redelivery) fails COPY
// on the key and is written again skipping them: each change once.
func TestWriteRedeliveredChangesOnce(t *testing.T) {
	db := pgtest.NewPool(t)
	c := newConsumer(t, db, kafkatest.NewCluster(t))
	ctx := context.Background()
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, change(100+i, paymentUUID(i), "PENDING"))
	}
	if err := c.write(ctx, c.decode(recs[:3])); err != nil {
		t.Fatal(err)
	}
	if err := c.write(ctx, c.decode(recs[1:])); err != nil {
		t.Fatal(err)
	}
	if err := c.write(ctx, c.decode(recs)); err != nil {
		t.Fatal(err)
	}
	// The connector resent a change: twice in one batch.
	dup := change(200, paymentUUID(9), "PENDING")
	if err := c.write(ctx, c.decode([]*kgo.Record{dup, dup})); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM audit_events`); n != 6 {
		t.Fatalf("%d audit rows, want 6", n)
	}
	if n := count(t, db, `SELECT count(*) FROM audit_events WHERE event->'after'->>'status' = 'PENDING' AND payment_id::text = row_key::json->>'id'`); n != 6 {
		t.Fatalf("%d rows with the event and its key, want 6", n)
	}
}
