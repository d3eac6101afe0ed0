// Package audit consumes the CDC topics: it appends every captured change to
// audit_events (deduplicated on lsn, table and key, so redeliveries add
// nothing) and publishes CloudEvents notifications for creations and
// terminal transitions, committing Kafka offsets only after both.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/kafka"
)

// Config configures the consumer.
type Config struct {
	Brokers []string
	Group   string
}

// Consumer is the audit-consumer's loop.
type Consumer struct {
	db    *pgxpool.Pool
	cl    *kgo.Client
	log   *slog.Logger
	batch int // records per poll, so per audit write
	m     struct {
		audited, notified prometheus.Counter
		lag               prometheus.Histogram
	}
}

// New connects to Kafka as member of the consumer group.
func New(cfg Config, db *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) (*Consumer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(kafka.TopicPayments, kafka.TopicAttempts, kafka.TopicActions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Offsets are committed by hand, after the audit rows and the
		// notifications are written.
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(200*time.Millisecond),
		// Bounded buffering: the consumer's memory stays flat under a spike.
		kgo.FetchMaxBytes(8<<20),
		kgo.FetchMaxPartitionBytes(2<<20),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(2*time.Millisecond),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	c := &Consumer{db: db, cl: cl, log: log, batch: 2000}
	c.m.audited = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_audit_events_total", Help: "Change events consumed into audit_events (duplicates included)."})
	c.m.notified = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_notifications_total", Help: "Notifications published (redeliveries included)."})
	c.m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paysched_audit_lag_seconds", Help: "Commit to audit row.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}})
	reg.MustRegister(c.m.audited, c.m.notified, c.m.lag)
	return c, nil
}

// Close leaves the group and closes the client.
func (c *Consumer) Close() { c.cl.Close() }

// Run consumes until ctx ends. Batches flow through three stages, each
// one goroutine, so that decoding, the database write and the Kafka round
// trips of consecutive batches overlap: poll and decode batch N+2, write
// the audit rows of N+1, publish the notifications of N and commit its
// offsets. Writes and commits both keep poll order, and a batch reaches
// the commit stage only once its rows are written; the first failure stops
// every stage, so no offset is ever committed ahead of its audit row.
func (c *Consumer) Run(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	decoded := make(chan *batch, 1)
	written := make(chan *batch, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(written)
		for b := range decoded {
			if err := c.write(ctx, b); err != nil {
				cancel(err)
				return
			}
			select {
			case written <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for b := range written {
			if ctx.Err() != nil {
				return
			}
			if err := c.publish(ctx, b); err != nil {
				cancel(err)
				return
			}
		}
	}()
	c.poll(ctx, decoded)
	close(decoded)
	wg.Wait()
	if parent.Err() != nil {
		return nil
	}
	// Not committed: the records come again after a restart.
	return context.Cause(ctx)
}

// poll fetches and decodes batches until ctx ends.
func (c *Consumer) poll(ctx context.Context, out chan<- *batch) {
	for {
		fs := c.cl.PollRecords(ctx, c.batch)
		if ctx.Err() != nil {
			return
		}
		for _, e := range fs.Errors() {
			c.log.Warn("fetch", "topic", e.Topic, "partition", e.Partition, "err", e.Err)
		}
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		select {
		case out <- c.decode(recs):
		case <-ctx.Done():
			return
		}
	}
}

// batch is one poll's records on their way through the stages.
type batch struct {
	recs []*kgo.Record
	// the audit rows, as columns
	lsns     []int64
	tables   []string
	keys     []string
	ops      []string
	ids      []*string
	statuses []*string
	events   [][]byte
	commits  []time.Time
	notes    []*kgo.Record
}

// Len is the number of audit rows.
func (b *batch) Len() int { return len(b.lsns) }

func (c *Consumer) decode(recs []*kgo.Record) *batch {
	n := len(recs)
	b := &batch{recs: recs, lsns: make([]int64, 0, n), tables: make([]string, 0, n), keys: make([]string, 0, n),
		ops: make([]string, 0, n), ids: make([]*string, 0, n), statuses: make([]*string, 0, n),
		events: make([][]byte, 0, n), commits: make([]time.Time, 0, n)}
	for _, r := range recs {
		e, err := parseEnvelope(r.Value)
		if err == nil && (e.Source.Table == "" || !validOp(e.Op)) {
			// The database would refuse the row, and with it the batch.
			err = errors.New("no source table or no valid op")
		}
		if err != nil {
			c.log.Error("skipping an event that is not a Debezium envelope", "topic", r.Topic, "offset", r.Offset, "err", err)
			continue
		}
		rw := e.After
		if rw == nil {
			rw = e.Before
		}
		if rw == nil {
			rw = &row{}
		}
		b.lsns = append(b.lsns, e.Source.LSN)
		b.tables = append(b.tables, e.Source.Table)
		b.keys = append(b.keys, string(r.Key))
		b.ops = append(b.ops, e.Op)
		b.events = append(b.events, r.Value)
		b.commits = append(b.commits, time.UnixMilli(e.Source.TsMs))
		switch e.Source.Table {
		case "payment_attempts", "payment_actions":
			b.ids = append(b.ids, str(rw.PaymentID))
		default:
			b.ids = append(b.ids, str(rw.ID))
		}
		if e.Source.Table == "payment_actions" {
			b.statuses = append(b.statuses, str(rw.NewStatus))
		} else {
			b.statuses = append(b.statuses, str(rw.Status))
		}
		if note := notification(e); note != nil {
			b.notes = append(b.notes, note)
		}
	}
	return b
}

func validOp(op string) bool { return op == "c" || op == "u" || op == "d" || op == "r" }

// auditColumns are the columns the consumer writes, in copyRows.Values order.
var auditColumns = []string{"lsn", "table_name", "row_key", "op", "payment_id", "status", "event", "committed_at"}

// insertSQL appends audit rows; ON CONFLICT makes redelivery a no-op.
const insertSQL = `
INSERT INTO audit_events (lsn, table_name, row_key, op, payment_id, status, event, committed_at)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::uuid[], $6::text[], $7::json[], $8::timestamptz[])
ON CONFLICT (lsn, table_name, row_key) DO NOTHING`

// write appends a batch's audit rows. COPY first: it is the cheapest way
// in, but it cannot skip duplicates, so a batch holding a change already
// written (a redelivery after a restart or a rebalance) fails as a whole
// with a unique violation and is written again with INSERT ... ON
// CONFLICT DO NOTHING. Either way every change is in audit_events once.
func (c *Consumer) write(ctx context.Context, b *batch) error {
	if b.Len() > 0 {
		_, err := c.db.CopyFrom(ctx, pgx.Identifier{"audit_events"}, auditColumns, &copyRows{b: b, i: -1})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			events := make([]string, len(b.events))
			for i, e := range b.events {
				events[i] = string(e)
			}
			_, err = c.db.Exec(ctx, insertSQL, b.lsns, b.tables, b.keys, b.ops, b.ids, b.statuses, events, b.commits)
		}
		if err != nil {
			return fmt.Errorf("write audit events: %w", err)
		}
	}
	for _, t := range b.commits {
		c.m.lag.Observe(time.Since(t).Seconds())
	}
	c.m.audited.Add(float64(b.Len()))
	return nil
}

// copyRows feeds a batch to COPY, one reused row of values.
type copyRows struct {
	b    *batch
	i    int
	vals [8]any
}

func (r *copyRows) Next() bool { r.i++; return r.i < r.b.Len() }
func (r *copyRows) Err() error { return nil }
func (r *copyRows) Values() ([]any, error) {
	b, i := r.b, r.i
	r.vals = [8]any{b.lsns[i], b.tables[i], b.keys[i], b.ops[i], b.ids[i], b.statuses[i], b.events[i], b.commits[i]}
	return r.vals[:], nil
}

// publish sends a written batch's notifications, then commits its offsets.
func (c *Consumer) publish(ctx context.Context, b *batch) error {
	if len(b.notes) > 0 {
		if err := c.cl.ProduceSync(ctx, b.notes...).FirstErr(); err != nil {
			return fmt.Errorf("publish notifications: %w", err)
		}
		c.m.notified.Add(float64(len(b.notes)))
	}
	if err := c.cl.CommitRecords(ctx, b.recs...); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	return nil
}

var terminal = map[string]bool{"COMPLETED": true, "FAILED": true, "CANCELLED": true, "DEAD_LETTERED": true}

// notification is the CloudEvent (binary mode) for a payments change that
// clients care about: its creation and each terminal or cancel transition;
// nil otherwise. ce_id is derived from the change itself (lsn, payment,
// type), so a redelivered change yields the same ce_id and consumers drop
// the duplicate: exactly once in effect without Kafka transactions.
func notification(e envelope) *kgo.Record {
	if e.Source.Table != "payments" || e.After == nil {
		return nil
	}
	var status string
	if p := str(e.After.Status); p != nil {
		status = *p
	}
	var typ string
	switch {
	case e.Op == "c" || e.Op == "r":
		typ = "paysched.payment.created"
	case e.Op == "u" && terminal[status] && (e.Before == nil || !sameString(e.Before.Status, status)):
		typ = "paysched.payment." + strings.ToLower(status)
	default:
		return nil
	}
	var id string
	if p := str(e.After.ID); p != nil {
		id = *p
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%d|%s|%s", e.Source.LSN, id, typ)))
	return &kgo.Record{Topic: kafka.TopicNotifications, Key: []byte(id), Value: noteData(e.After, id, status), Headers: []kgo.RecordHeader{
		{Key: "ce_specversion", Value: []byte("1.0")},
		{Key: "ce_id", Value: []byte(hex.EncodeToString(sum[:16]))},
		{Key: "ce_type", Value: []byte(typ)},
		{Key: "ce_source", Value: []byte("/paysched/payments")},
		{Key: "ce_time", Value: []byte(time.UnixMilli(e.Source.TsMs).UTC().Format(time.RFC3339Nano))},
		{Key: "ce_subject", Value: []byte(id)},
		{Key: "content-type", Value: []byte("application/json")},
	}}
}

// sameString: raw is a JSON string equal to s.
func sameString(raw []byte, s string) bool {
	p := str(raw)
	return p != nil && *p == s
}

// noteData is the notification's JSON body: the payment's fields as the
// change carried them (numbers keep every digit), keys in sorted order.
func noteData(r *row, id, status string) []byte {
	b := make([]byte, 0, 384)
	field := func(name string, raw []byte) {
		if len(b) == 0 {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		if raw == nil {
			raw = []byte("null")
		}
		b = append(b, raw...)
	}
	quote := func(s string) []byte { q, _ := json.Marshal(s); return q }
	field("amount", r.Amount)
	field("attempt", r.Attempt)
	field("currency", r.Currency)
	field("deadLetterReason", r.DeadLetterReason)
	field("dueAt", r.DueTime)
	field("gatewayRef", r.GatewayRef)
	field("payee", r.Payee)
	field("payer", r.Payer)
	field("paymentId", quote(id))
	field("status", quote(status))
	return append(b, '}')
}
