// Package kafkaclient tests the notification topic the way a consumer team
// reads it, with a mainstream client nobody on the project wrote: the real
// audit-consumer turns change events into CloudEvents on a snappy-compressed
// topic (the services' default), and kafkajs reads them (consume.mjs),
// failing without a snappy codec and reading every event with
// kafkajs-snappy. The README's advice to consumers rests on this.
package kafkaclient_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/audit"
	"github.com/paysched/paysched/pkg/events/cdc"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/test/kafkatest"
	"github.com/paysched/paysched/test/nodetest"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestKafkajsReadsNotifications(t *testing.T) {
	nodetest.Require(t, "the Kafka client test", "node", "npm")
	db := pgtest.NewPool(t)
	topics := kafka.DefaultTopics
	seeds := kafkatest.NewCluster(t, topics.Payments, topics.Attempts, topics.Actions, topics.Notifications, topics.Heartbeat)
	snappy, err := kafka.Compression("snappy")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Three payments' creation, as cdc writes them.
	rel := &envelope.Relation{Schema: "public", Table: "payments", Columns: []envelope.Column{
		{Name: "id", OID: 2950}, {Name: "payer", OID: 25}, {Name: "payee", OID: 25}, {Name: "amount_minor", OID: 20},
		{Name: "currency", OID: 1042}, {Name: "due_time", OID: 1184}, {Name: "status", OID: 25}, {Name: "attempt", OID: 23}}}
	src := envelope.Source{Name: "paysched", DB: "paysched"}
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerBatchCompression(snappy))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 3
	for i := range n {
		id := uuid.NewString()
		tup := &pglogrepl.TupleData{}
		for _, v := range []string{id, "alice", "bob", strconv.Itoa(100 + i), "USD", "2026-12-01 09:00:00+00", "PENDING", "0"} {
			tup.Columns = append(tup.Columns, &pglogrepl.TupleDataColumn{DataType: 't', Length: uint32(len(v)), Data: []byte(v)})
		}
		tup.ColumnNum = uint16(len(tup.Columns))
		ch := cdc.Change{Rel: rel, Op: "c", After: tup, LSN: pglogrepl.LSN(1000 + i), TxID: 7, CommitTime: time.Now()}
		key, err := cdc.Key(ch)
		if err != nil {
			t.Fatal(err)
		}
		val, err := cdc.Value(ch, src, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topics.Payments, Key: key, Value: val}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// The real audit-consumer, compressing notifications as the service
	// does by default.
	c, err := audit.New(audit.Config{Brokers: seeds, Group: "audit", Compression: snappy, WriteStreams: 1}, db, nil,
		prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(actx) }()
	t.Cleanup(func() { stop(); _ = <-done })

	// The notifications are there, in snappy batches.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics.Notifications),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := 0
	kafkatest.Drain(ctx, cl, func() bool { return got >= n }, func(r *kgo.Record) {
		if r.Attrs.CompressionType() != 2 { // 2: snappy in Kafka's record batch attributes
			t.Errorf("notification batch compression %d, want snappy", r.Attrs.CompressionType())
		}
		got++
	})
	if got < n {
		t.Fatalf("%d notifications, want %d", got, n)
	}

	dir := nodetest.Install(t, "package.json", "package-lock.json", "consume.mjs")
	out := nodetest.Run(t, dir, []string{"PAYSCHED_BROKERS=" + strings.Join(seeds, ","), "PAYSCHED_TOPIC=" + topics.Notifications,
		"PAYSCHED_COUNT=" + strconv.Itoa(n)}, "node", "consume.mjs")
	t.Logf("kafkajs:\n%s", out)
}
