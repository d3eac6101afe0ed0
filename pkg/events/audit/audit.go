// Package audit consumes the CDC topics: it appends every captured change to
// audit_events (deduplicated on lsn, table and key, so redeliveries add
// nothing) and publishes CloudEvents notifications for creations and
// terminal transitions, committing Kafka offsets only after both.
package audit

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/audit/auditdb"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// Config configures the consumer.
type Config struct {
	Brokers []string
	Group   string
	// Compression is the notifications' batch codec; the zero value is none.
	Compression kgo.CompressionCodec
	// WriteStreams is how many COPY streams write a batch at once (at
	// least 1).
	WriteStreams int
	// MaxDefer bounds how long a batch's audit rows are held back while
	// payments are overdue (see yield); zero never holds one back.
	MaxDefer time.Duration
	// Backlog is how late the oldest unclaimed payment must be for the
	// engine to count as behind (default 5 s).
	Backlog time.Duration
	// Topics are the CDC topics read and the notification topic written
	// (the zero value: kafka.DefaultTopics).
	Topics kafka.Topics
	// KafkaOpts are extra client options: the brokers' TLS and SASL
	// (kafkaauth.Flags.Opts).
	KafkaOpts []kgo.Opt
}

// Validate reports the first configuration error.
func (c Config) Validate() error {
	switch {
	case len(c.Brokers) == 0 || c.Brokers[0] == "":
		return errors.New("--kafka-brokers: at least one broker is required")
	case c.Group == "":
		return errors.New("--group must not be empty")
	case c.WriteStreams < 1:
		return fmt.Errorf("--write-streams must be at least 1, got %d", c.WriteStreams)
	case c.MaxDefer < 0:
		return fmt.Errorf("--max-defer must not be negative, got %s", c.MaxDefer)
	case c.Backlog < 0:
		return fmt.Errorf("--backlog must not be negative, got %s", c.Backlog)
	}
	return nil
}

// Consumer is the audit-consumer's loop.
type Consumer struct {
	// db is the schedule's database (is the engine behind?); logDB the
	// audit log's, where audit_events is written.
	db    *pgxpool.Pool
	logDB *pgxpool.Pool
	cl    *kgo.Client
	log   *slog.Logger
	batch int // records per poll, so per audit write
	// copyBufs hold each write stream's COPY data, reused batch after batch.
	copyBufs [][]byte
	maxDefer time.Duration
	backlog  time.Duration
	// notifications is the CloudEvents topic.
	notifications string
	// behind is engineBehind's last answer, taken at behindAt.
	behind   bool
	behindAt time.Time
	// overdue asks whether the engine is behind (nil: store.Overdue).
	overdue func(context.Context, pgdb.DB, time.Duration) (bool, error)
	m       struct {
		audited, notified, deferred prometheus.Counter
		lag                         prometheus.Histogram
		holding                     prometheus.Gauge
	}
}

// New connects to Kafka as member of the consumer group. schedule is the
// schedule's database, auditLog the audit log's (nil: the schedule's
// own, as development runs may have it).
func New(cfg Config, schedule, auditLog *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) (*Consumer, error) {
	if cfg.WriteStreams == 0 {
		cfg.WriteStreams = 1
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("audit-consumer config: %w", err)
	}
	if cfg.Topics == (kafka.Topics{}) {
		cfg.Topics = kafka.DefaultTopics
	}
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.WithLogger(kafka.ClientLogger(log)),
		kgo.ConsumeTopics(cfg.Topics.Payments, cfg.Topics.Attempts, cfg.Topics.Actions, cfg.Topics.ScheduleEvents),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Offsets are committed by hand, after the audit rows and the
		// notifications are written.
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(200 * time.Millisecond),
		// Bounded buffering: the consumer's memory stays flat under a spike.
		kgo.FetchMaxBytes(8 << 20),
		kgo.FetchMaxPartitionBytes(2 << 20),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(2 * time.Millisecond),
		kgo.ProducerBatchCompression(cfg.Compression),
	}
	cl, err := kgo.NewClient(append(opts, cfg.KafkaOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	if auditLog == nil {
		auditLog = schedule
	}
	if cfg.Backlog == 0 {
		cfg.Backlog = 5 * time.Second
	}
	c := &Consumer{db: schedule, logDB: auditLog, cl: cl, log: log, notifications: cfg.Topics.Notifications, batch: 2000,
		copyBufs: make([][]byte, max(1, cfg.WriteStreams)), maxDefer: cfg.MaxDefer, backlog: cfg.Backlog}
	c.m.audited = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_audit_events_total", Help: "Change events consumed into audit_events (duplicates included)."})
	c.m.notified = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_notifications_total", Help: "Notifications published (redeliveries included)."})
	c.m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paysched_audit_lag_seconds", Help: "Commit to audit row.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}})
	c.m.deferred = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_audit_deferred_seconds_total",
		Help: "Time audit writes were held back while payments were overdue."})
	c.m.holding = prometheus.NewGauge(prometheus.GaugeOpts{Name: "paysched_audit_holding_back",
		Help: "1 while audit writes are held back behind a backlog of due payments (notifications are not)."})
	reg.MustRegister(c.m.audited, c.m.notified, c.m.deferred, c.m.lag, c.m.holding)
	return c, nil
}

// Close leaves the group and closes the client.
func (c *Consumer) Close() { c.cl.Close() }

// Run consumes until ctx ends. Batches flow through stages, each one
// goroutine, so that decoding, publishing, the database write and the
// Kafka round trips of consecutive batches overlap: poll and decode batch
// N+2; publish its notifications at once (asynchronously, in poll order:
// a notification never waits for the audit log, nor for its hold-back);
// write the audit rows of N+1; and commit N's offsets once its rows are
// written and its notifications acknowledged. Commits keep poll order, and
// the first failure stops every stage, so no offset is ever committed
// ahead of its audit row or its notification.
func (c *Consumer) Run(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	// The poll stage runs up to four batches ahead: the client asks the
	// broker for more only once the records it holds are taken, so a
	// catch-up then overlaps that round trip with the writes.
	decoded := make(chan *batch, 4)
	published := make(chan *batch, 4)
	written := make(chan *batch, 1)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		defer close(published)
		for b := range decoded {
			c.publish(ctx, b)
			select {
			case published <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		defer close(written)
		for b := range published {
			if err := c.yield(ctx, b); err != nil {
				return
			}
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
			if err := c.commit(ctx, b); err != nil {
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
	recs     []*kgo.Record
	rows     []auditRow
	notes    []*kgo.Record
	oldestMs int64 // the earliest commit among rows
	// acked counts the notifications not yet acknowledged; pubErr is the
	// first failure.
	acked  sync.WaitGroup
	mu     sync.Mutex
	pubErr error
}

// auditRow is one change as audit_events stores it; byte fields alias the
// record.
type auditRow struct {
	lsn      int64
	table    string
	key      []byte
	op       string
	id       [16]byte
	idState  uint8  // idNull, idUUID (id holds it) or idText (idText holds it)
	idText   []byte // a payment id that is not a canonical uuid: Postgres parses it
	status   []byte
	hasState bool
	event    []byte
	commitMs int64
}

const (
	idNull uint8 = iota
	idUUID
	idText
)

func (c *Consumer) decode(recs []*kgo.Record) *batch {
	b := &batch{recs: recs, rows: make([]auditRow, 0, len(recs))}
	var e envelope.Event
	for _, r := range recs {
		err := e.Decode(r.Value)
		if err == nil && (e.Source.Table == "" || !validOp(e.Op)) {
			// The database would refuse the row, and with it the batch.
			err = errors.New("no source table or no valid op")
		}
		if err != nil {
			c.log.Error("skipping an event that is not a Debezium envelope", "topic", r.Topic, "offset", r.Offset, "err", err)
			continue
		}
		rw := e.After()
		if rw == nil {
			rw = e.Before()
		}
		if rw == nil {
			rw = &envelope.Row{}
		}
		ar := auditRow{lsn: e.Source.LSN, table: e.Source.Table, key: r.Key, op: e.Op, event: r.Value, commitMs: e.Source.TsMs}
		id := rw.ID
		if e.Source.Table == "payment_attempts" || e.Source.Table == "payment_actions" {
			id = rw.PaymentID
		}
		if len(id) > 0 && id[0] == '"' {
			t := envelope.Text(id)
			if u, ok := parseUUID(t); ok {
				ar.id, ar.idState = u, idUUID
			} else {
				ar.idText, ar.idState = t, idText
			}
		}
		st := rw.Status
		if e.Source.Table == "payment_actions" {
			st = rw.NewStatus
		}
		if len(st) > 0 && st[0] == '"' {
			ar.status, ar.hasState = envelope.Text(st), true
		}
		b.rows = append(b.rows, ar)
		if len(b.rows) == 1 || ar.commitMs < b.oldestMs {
			b.oldestMs = ar.commitMs
		}
		if note := noteRecord(&e); note != nil {
			note.Topic = c.notifications
			b.notes = append(b.notes, note)
		}
	}
	return b
}

func validOp(op string) bool { return op == "c" || op == "u" || op == "d" || op == "r" }

// parseUUID reads the canonical form (8-4-4-4-12 hex digits).
func parseUUID(s []byte) ([16]byte, bool) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
		i += 2
	}
	return u, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// minStreamRows is the smallest share of a batch worth a stream of its own.
const minStreamRows = 250

// write appends a batch's audit rows, split over the write streams: one
// COPY keeps one Postgres backend busy, and a backlog (after a spike or an
// outage) drains as fast as the streams write. The order of rows within a
// batch does not matter (each is keyed by its change), and the batch counts
// as written only once every stream is done, so offsets still follow rows.
func (c *Consumer) write(ctx context.Context, b *batch) error {
	if n := min(len(c.copyBufs), (len(b.rows)+minStreamRows-1)/minStreamRows); n > 0 {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			rows := b.rows[i*len(b.rows)/n : (i+1)*len(b.rows)/n]
			wg.Go(func() { errs[i] = c.writeRows(ctx, &c.copyBufs[i], rows) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("write audit events: %w", err)
		}
	}
	for i := range b.rows {
		c.m.lag.Observe(time.Since(time.UnixMilli(b.rows[i].commitMs)).Seconds())
	}
	c.m.audited.Add(float64(len(b.rows)))
	return nil
}

// writeRows writes rows on one stream. COPY first: it is the cheapest way
// in, but it cannot skip duplicates, so rows holding a change already
// written (a redelivery after a restart or a rebalance) fail as a whole
// with a unique violation and are written again with INSERT ... ON
// CONFLICT DO NOTHING. Either way every change is in audit_events once.
func (c *Consumer) writeRows(ctx context.Context, buf *[]byte, rows []auditRow) error {
	err := c.copy(ctx, buf, rows)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		err = c.insert(ctx, rows)
	}
	return err
}

// copy writes rows with one COPY, encoded here into buf: the rows are
// bytes the consumer already holds, so pgx's per-value encoding would only
// cost.
func (c *Consumer) copy(ctx context.Context, buf *[]byte, rows []auditRow) error {
	for i := range rows {
		if rows[i].idState == idText {
			return c.insert(ctx, rows) // Postgres parses non-canonical uuids
		}
	}
	*buf = encodeCopy((*buf)[:0], rows)
	conn, err := c.logDB.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = conn.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(*buf), copySQL)
	return err
}

// pgEpochMicros is 2000-01-01 UTC, Postgres' timestamp epoch, in Unix
// microseconds.
const pgEpochMicros = 946_684_800_000_000

// encodeCopy appends rows in COPY's binary format: a header, per row the
// field count and each field's length (-1 for NULL) and bytes in the
// types' binary forms (bigint and timestamptz big-endian, uuid 16 bytes,
// text and char their bytes), and the trailer.
func encodeCopy(b []byte, rows []auditRow) []byte {
	b = append(b, "PGCOPY\n\xff\r\n\x00"...)
	b = binary.BigEndian.AppendUint32(b, 0) // flags
	b = binary.BigEndian.AppendUint32(b, 0) // header extension
	field := func(b, v []byte) []byte {
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		return append(b, v...)
	}
	null := func(b []byte) []byte { return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF) }
	for i := range rows {
		r := &rows[i]
		b = binary.BigEndian.AppendUint16(b, 8)
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(r.lsn))
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.table)))
		b = append(b, r.table...)
		b = field(b, r.key)
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.op)))
		b = append(b, r.op...)
		if r.idState == idUUID {
			b = field(b, r.id[:])
		} else {
			b = null(b)
		}
		if r.hasState {
			b = field(b, r.status)
		} else {
			b = null(b)
		}
		b = field(b, r.event)
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(r.commitMs*1000-pgEpochMicros))
	}
	return binary.BigEndian.AppendUint16(b, 0xFFFF)
}

// insert writes rows with INSERT ... ON CONFLICT DO NOTHING.
func (c *Consumer) insert(ctx context.Context, rows []auditRow) error {
	n := len(rows)
	lsns, tables, keys, ops := make([]int64, n), make([]string, n), make([]string, n), make([]string, n)
	// An empty id or status is written as none (auditdb/audit.sql).
	ids, statuses, events, commits := make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i := range rows {
		r := &rows[i]
		lsns[i], tables[i], keys[i], ops[i] = r.lsn, r.table, string(r.key), r.op
		switch r.idState {
		case idUUID:
			ids[i] = uuidString(r.id)
		case idText:
			ids[i] = string(r.idText)
		}
		if r.hasState {
			statuses[i] = string(r.status)
		}
		events[i], commits[i] = string(r.event), time.UnixMilli(r.commitMs)
	}
	return auditdb.New(c.logDB).AppendAuditRows(ctx, auditdb.AppendAuditRowsParams{Lsns: lsns, TableNames: tables, RowKeys: keys,
		Ops: ops, PaymentIds: ids, Statuses: statuses, Events: events, CommittedAt: commits})
}

func uuidString(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// publish produces a batch's notifications without waiting for their
// acknowledgement (commit waits for it): records produced one after
// another keep their order per partition.
func (c *Consumer) publish(ctx context.Context, b *batch) {
	b.acked.Add(len(b.notes))
	for _, r := range b.notes {
		c.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				b.mu.Lock()
				if b.pubErr == nil {
					b.pubErr = err
				}
				b.mu.Unlock()
			}
			b.acked.Done()
		})
	}
}

// commit waits for a written batch's notifications to be acknowledged,
// then commits its offsets.
func (c *Consumer) commit(ctx context.Context, b *batch) error {
	b.acked.Wait()
	if b.pubErr != nil {
		return fmt.Errorf("publish notifications: %w", b.pubErr)
	}
	c.m.notified.Add(float64(len(b.notes)))
	if err := c.cl.CommitRecords(ctx, b.recs...); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	return nil
}

// Notified says which notification a change of the payments table emits:
// its CloudEvent type and id, ok false when it emits none. Clients care
// about a payment's creation and each terminal or cancel transition.
// ce_id is derived from what happened (the payment, the move, its attempt
// and when: notification.PaymentID), never from the change's log
// position, so a change redelivered, or read again after `cdc --resync`,
// yields the same ce_id and consumers drop the duplicate: exactly once in
// effect without Kafka transactions. The operator console shows a
// payment's notifications with it.
func Notified(e *envelope.Event) (ceType, ceID string, ok bool) {
	after := e.After()
	if e.Source.Table != "payments" || after == nil {
		return "", "", false
	}
	var status string
	if p := envelope.StringOf(after.Status); p != nil {
		status = *p
	}
	switch {
	case e.Op == "r" && payment.Status(status).AtRest():
		// A snapshot (cdc --resync after a gap) of a payment that has come
		// to rest: announce where it is; its earlier notifications may be
		// in the gap.
		ceType = notification.TypePrefix + strings.ToLower(status)
	case e.Op == "c" || e.Op == "r":
		ceType = notification.Created
	case e.Op == "u" && payment.Status(status).AtRest() && !sameString(leftStatus(e), status):
		ceType = notification.TypePrefix + strings.ToLower(status)
	default:
		return "", "", false
	}
	attempt, _ := strconv.ParseInt(string(after.Attempt), 10, 64)
	return ceType, notification.PaymentID(paymentID(e), ceType, attempt, after.UpdatedAt), true
}

// leftStatus is the raw status a payments update left: the before image's
// when the event has one (REPLICA IDENTITY FULL, as before schema 15), else
// the row's prev_status. Nil when neither says: a reader then announces
// the status, as it always did without a before image.
func leftStatus(e *envelope.Event) []byte {
	if b := e.Before(); b != nil {
		return b.Status
	}
	return e.After().PrevStatus
}

func paymentID(e *envelope.Event) string {
	if p := envelope.StringOf(e.After().ID); p != nil {
		return *p
	}
	return ""
}

// noteRecord is the CloudEvent (binary mode) Notified names, as a
// record for the notifications topic; nil when the change emits none.
func noteRecord(e *envelope.Event) *kgo.Record {
	if e.Source.Table == "schedule_events" {
		return scheduleNote(e)
	}
	typ, ceID, ok := Notified(e)
	if !ok {
		return nil
	}
	after := e.After()
	var status, tenant string
	if p := envelope.StringOf(after.Status); p != nil {
		status = *p
	}
	if p := envelope.StringOf(after.Tenant); p != nil {
		tenant = *p
	}
	id := paymentID(e)
	return notification.Note{ID: ceID, Type: typ, Source: notification.SourcePayments, Time: time.UnixMilli(e.Source.TsMs),
		Subject: id, Tenant: tenant, Key: []byte(id), Data: noteData(after, id, status),
		Replay: e.Op == "r"}.Record(kafka.DefaultTopics.Notifications)
}

// sameString: raw is a JSON string equal to s.
func sameString(raw []byte, s string) bool {
	p := envelope.StringOf(raw)
	return p != nil && *p == s
}

// noteData is the notification's JSON body: the payment's fields as the
// change carried them (numbers keep every digit), keys in sorted order.
func noteData(r *envelope.Row, id, status string) []byte {
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
	field("failureReason", r.FailureReason)
	field("gatewayRef", r.GatewayRef)
	if present(r.Occurrence) {
		// An occurrence of a recurring schedule says which; a one-off's
		// data is as it always was.
		field("occurrence", r.Occurrence)
	}
	field("payee", r.Payee)
	field("payer", r.Payer)
	field("paymentId", quote(id))
	if present(r.ScheduleID) {
		field("scheduleId", r.ScheduleID)
	}
	field("status", quote(status))
	return append(b, '}')
}

// present says a raw JSON value is there and not null.
func present(raw []byte) bool { return len(raw) > 0 && string(raw) != "null" }

// scheduleNote is the notification of a schedule event (a row of
// schedule_events, written by the database as the schedule changed): its
// type from the event's kind, its data the schedule as the change left
// it. Nil for anything but a well-formed insert (or its snapshot).
func scheduleNote(e *envelope.Event) *kgo.Record {
	after := e.After()
	if after == nil || (e.Op != "c" && e.Op != "r") {
		return nil
	}
	id, kind, data := envelope.StringOf(after.ScheduleID), envelope.StringOf(after.Kind), envelope.StringOf(after.Data)
	n, err := strconv.ParseInt(string(after.ID), 10, 64)
	if id == nil || kind == nil || data == nil || err != nil || !json.Valid([]byte(*data)) {
		return nil
	}
	var tenant string
	if p := envelope.StringOf(after.Tenant); p != nil {
		tenant = *p
	}
	typ := notification.ScheduleTypePrefix + strings.ToLower(*kind)
	return notification.Note{ID: notification.ScheduleEventID(*id, typ, n), Type: typ, Source: notification.SourceSchedules,
		Time: time.UnixMilli(e.Source.TsMs), Subject: *id, Tenant: tenant, Key: []byte(*id), Data: []byte(*data),
		Replay: e.Op == "r"}.Record(kafka.DefaultTopics.Notifications)
}
