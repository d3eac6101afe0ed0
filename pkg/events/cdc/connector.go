// Package cdc is a Debezium-style connector: it reads Postgres logical
// replication (pgoutput) and writes each row change to Kafka as a Debezium
// envelope (pkg/events/envelope), acknowledging WAL to Postgres only once
// Kafka has acknowledged every event up to it.
package cdc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/cdc/cdcdb"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
)

// Config configures the connector.
type Config struct {
	DatabaseURL       string
	Slot              string // permanent replication slot
	Publication       string
	Source            envelope.Source
	Brokers           []string
	Compression       kgo.CompressionCodec // batch codec (kafka.Compression); the zero value is none
	HeartbeatTopic    string
	StatusInterval    time.Duration // how often the acked LSN is reported
	HeartbeatInterval time.Duration // heartbeat writes and events
	// Schemas: keys and envelopes in the schema-ful form, as Debezium's
	// JsonConverter writes them with schemas.enable=true.
	Schemas bool
	// Resync: when the slot does not continue from the last confirmed
	// position, recreate it and emit snapshot events for the rows changed
	// since then, instead of refusing to start.
	Resync bool
	// Failover makes the slot a failover slot on PostgreSQL 17 and later
	// (failover.go): standbys with sync_replication_slots keep a copy, so a
	// promotion does not lose it.
	Failover bool
	// KafkaOpts are extra client options: the brokers' TLS and SASL
	// (kafkaauth.Flags.Opts).
	KafkaOpts []kgo.Opt
	// Text streams pgoutput's text form of every column instead of its
	// binary form (binary 'true'): the binary form spares the walsender
	// every column's output function, and the encoder reads the types the
	// captured tables use (envelope.BinaryTypes) into the same JSON.
	Text bool
	// PublishAttempts publishes every attempt row as its own change, as
	// before schema 15, instead of deriving the change events of the rows
	// an outcome's payment change announces (attempts.go).
	PublishAttempts bool
}

// Validate reports the first configuration error.
func (c Config) Validate() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("--database-url must not be empty")
	case c.Slot == "" || c.Publication == "":
		return errors.New("--slot and --publication must not be empty")
	case !slotNameRE.MatchString(c.Slot):
		return fmt.Errorf("--slot %q: a slot name is 1 to 63 lower-case letters, digits and underscores", c.Slot)
	case c.Source.Name == "":
		return errors.New("--topic-prefix must not be empty")
	case len(c.Brokers) == 0 || c.Brokers[0] == "":
		return errors.New("--kafka-brokers: at least one broker is required")
	case c.HeartbeatTopic == "":
		return errors.New("heartbeat topic must not be empty")
	case c.StatusInterval <= 0:
		return fmt.Errorf("--status-interval must be positive, got %s", c.StatusInterval)
	case c.HeartbeatInterval <= 0:
		return fmt.Errorf("--heartbeat-interval must be positive, got %s", c.HeartbeatInterval)
	}
	return nil
}

// Connector streams row changes to Kafka.
type Connector struct {
	cfg  Config
	log  *slog.Logger
	db   *pgxpool.Pool
	kafk *kgo.Client
	rels map[uint32]*envelope.Relation
	acks ackQueue
	// lastCommit is the commit LSN of the last transaction read: the slot's
	// confirmed position at the start, then each Commit's.
	lastCommit pglogrepl.LSN
	// recorded is the last position written to cdc_state.
	recorded pglogrepl.LSN
	// scratch column lists for the tuple being read
	before, after []envelope.Datum
	// ann derives announced attempts' events (nil: PublishAttempts).
	ann *announcer
	// beforeResync runs between a resync's slot and its read (tests: a
	// change there must reach consumers once, in the stream).
	beforeResync func(context.Context)
	m            struct {
		events  prometheus.Counter
		slotLag prometheus.Gauge
		lag     prometheus.Histogram
		gap     prometheus.Gauge
	}
}

// New builds a connector; Run starts it.
func New(cfg Config, db *pgxpool.Pool, reg prometheus.Registerer, log *slog.Logger) (*Connector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cdc config: %w", err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...),
		// Idempotent producer (franz-go's default) with acks=all: retries
		// never duplicate or reorder within a partition.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.WithLogger(kafka.ClientLogger(log)),
		kgo.MaxBufferedRecords(200_000),
		kgo.ProducerBatchMaxBytes(4 << 20),
		kgo.ProducerBatchCompression(cfg.Compression),
	}
	cl, err := kgo.NewClient(append(opts, cfg.KafkaOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	c := &Connector{cfg: cfg, log: log, db: db, kafk: cl, rels: map[uint32]*envelope.Relation{}}
	c.m.events = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_cdc_events_total", Help: "Change events acknowledged by Kafka."})
	c.m.slotLag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "paysched_cdc_slot_lag_bytes", Help: "WAL the slot holds back: current LSN minus confirmed flush LSN."})
	c.m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paysched_cdc_lag_seconds",
		Help: "Commit to Kafka acknowledgement.", Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}})
	c.m.gap = prometheus.NewGauge(prometheus.GaugeOpts{Name: "paysched_cdc_slot_gap",
		Help: "1 while the replication slot does not continue from the last position cdc confirmed (cdc refuses to stream; alert)."})
	reg.MustRegister(c.m.events, c.m.slotLag, c.m.lag, c.m.gap)
	return c, nil
}

// PublishedTables are the tables the connector streams.
var PublishedTables = []string{"payments", "payment_attempts", "payment_actions", "schedule_events", "cdc_heartbeat"}

// ensureTable runs create only when table does not exist yet. The
// migrations make cdc's tables, and CREATE TABLE IF NOT EXISTS checks for
// CREATE on the schema before it looks for the table, which cdc's role
// does not have.
func (c *Connector) ensureTable(ctx context.Context, table, create string) error {
	exists, err := cdcdb.New(c.db).TableExists(ctx, table)
	if err != nil {
		return fmt.Errorf("look for %s: %w", table, err)
	}
	if exists {
		return nil
	}
	if _, err := c.db.Exec(ctx, create); err != nil {
		return fmt.Errorf("create %s: %w", table, err)
	}
	return nil
}

// Setup creates what the connector needs, idempotently: the publication
// (partitions published as their root, so events name "payments"), the
// heartbeat table, and the permanent slot.
func (c *Connector) Setup(ctx context.Context) error {
	// The heartbeat table is published too: its periodic update reaches the
	// connector as a small transaction whose end LSN can be confirmed, so an
	// idle slot keeps moving and never pins WAL.
	if err := c.ensureTable(ctx, "cdc_heartbeat", heartbeatTableSQL); err != nil {
		return fmt.Errorf("heartbeat table: %w", err)
	}
	q := cdcdb.New(c.db)
	exists, err := q.PublicationExists(ctx, c.cfg.Publication)
	if err != nil {
		return fmt.Errorf("check publication: %w", err)
	}
	if !exists {
		if _, err := c.db.Exec(ctx, createPublicationSQL(c.cfg.Publication)); err != nil {
			return fmt.Errorf("create publication: %w", err)
		}
	}
	// A publication made by an older version lacks the newer tables.
	for _, t := range PublishedTables {
		in, err := q.PublicationHasTable(ctx, cdcdb.PublicationHasTableParams{Pubname: c.cfg.Publication, TableName: t})
		if err != nil {
			return fmt.Errorf("check publication tables: %w", err)
		}
		if !in {
			if _, err := c.db.Exec(ctx, addTableSQL(c.cfg.Publication, t, "")); err != nil {
				return fmt.Errorf("add %s to publication: %w", t, err)
			}
		}
	}
	if err := c.ensureAttemptsFilter(ctx); err != nil {
		return err
	}
	if err := c.ensureTable(ctx, "cdc_state", stateTableSQL); err != nil {
		return fmt.Errorf("cdc_state table: %w", err)
	}
	exists, rec, gap, err := c.checkSlot(ctx)
	if err != nil {
		return err
	}
	if gap != nil {
		c.m.gap.Set(1)
		if !c.cfg.Resync {
			c.log.Error("refusing to stream: the slot does not continue from the last confirmed position", "slot", c.cfg.Slot,
				"confirmed_lsn", gap.LSN.String(), "confirmed_at", gap.ConfirmedAt, "why", gap.Why)
			return gap
		}
		c.log.Warn("resync: recreating the slot and emitting snapshot events", "slot", c.cfg.Slot, "since", rec.at, "why", gap.Why)
		if exists {
			if err := q.DropSlot(ctx, c.cfg.Slot); err != nil {
				return fmt.Errorf("resync: drop slot: %w", err)
			}
			exists = false
		}
	}
	failover, err := c.failoverSlots(ctx)
	if err != nil {
		return err
	}
	if exists {
		if failover {
			if err := c.ensureFailover(ctx); err != nil {
				return err
			}
		}
		if rec == nil {
			// First start with cdc_state (or the first ever with a slot made
			// by hand): record where the slot is.
			pos, err := q.SlotPosition(ctx, c.cfg.Slot)
			if err != nil {
				return fmt.Errorf("check slot: %w", err)
			}
			if at, err := pglogrepl.ParseLSN(pos.ConfirmedLsn); err == nil {
				return c.record(ctx, at)
			}
		}
		return nil
	}
	// A resync reads the rows at the slot's own snapshot: every change
	// before its consistent point is in the snapshot events, every change
	// after it in the stream, none in both and none in neither.
	at, snapshot, release, err := c.createSlot(ctx, failover, gap != nil)
	if err != nil {
		return err
	}
	if gap != nil {
		if c.beforeResync != nil {
			c.beforeResync(ctx)
		}
		n, err := c.resync(ctx, rec.at, at, rec.lsn, snapshot)
		release()
		if err != nil {
			return err
		}
		c.log.Warn("resync done: snapshot events emitted", "events", n, "since", rec.at.Add(-resyncMargin))
		c.m.gap.Set(0)
	}
	return c.record(ctx, at)
}

func (c *Connector) replConn(ctx context.Context) (*pgconn.PgConn, error) {
	url := c.cfg.DatabaseURL
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	cfg, err := pgconn.ParseConfig(url + sep + "replication=database")
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	// A wake-up finds 64 KB or more waiting (see rcvLowat), and pgproto3
	// reads at most 8 KB per call: a large buffer in front takes whatever
	// the socket holds in one read.
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, 1<<20), w)
	}
	// A Unix socket (a host that is a directory) is read paced, outside
	// the netpoller (see pacedConn): the cheapest way for both sides when
	// the connector runs beside Postgres.
	tcp := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network == "unix" {
			return dialPaced(ctx, addr)
		}
		return tcp(ctx, network, addr)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	return conn, nil
}

// The walsender sends each change with a send of its own. Woken for each,
// the connector spent most of its CPU during a spike on wake-ups (epoll,
// a read, the Go scheduler waking sysmon) rather than on the changes. With
// a 64 KB low-water mark it wakes once per ~50 changes, and data under the
// mark (a quiet stream) waits at most pollEvery.
const (
	rcvLowat  = 64 << 10
	pollEvery = 10 * time.Millisecond
)

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Close releases the Kafka client.
func (c *Connector) Close() { c.kafk.Close() }

// Run streams from the slot's confirmed position until ctx ends or Kafka
// fails for good; either way what was acknowledged is reported, and a
// restart resumes from there (events after it may be sent twice, never lost).
func (c *Connector) Run(ctx context.Context) error {
	if !c.cfg.PublishAttempts {
		ann, err := loadAnnouncer(ctx, c.db, c.cfg.Source)
		if err != nil {
			return err
		}
		c.ann = ann
	}
	conn, err := c.replConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// The stream resumes after the slot's confirmed position: the commit
	// before the first transaction it sends, as far as consumers know.
	if pos, err := cdcdb.New(c.db).SlotPosition(ctx, c.cfg.Slot); err == nil && pos.ConfirmedLsn != "" {
		if lsn, err := pglogrepl.ParseLSN(pos.ConfirmedLsn); err == nil {
			c.lastCommit = lsn
		}
	}
	err = pglogrepl.StartReplication(ctx, conn, c.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: c.pluginArgs(),
	})
	if err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	// Only now: a request's small reply would wait for the poll.
	if err := setRcvLowat(conn.Conn(), rcvLowat); err != nil {
		return fmt.Errorf("receive low-water mark: %w", err)
	}
	c.log.Info("streaming", "slot", c.cfg.Slot, "publication", c.cfg.Publication)
	fatal := make(chan error, 1)
	c.acks.onFail = func(err error) {
		select {
		case fatal <- err:
		default:
		}
	}
	var tx *txn
	nextStatus := time.Now()
	nextBeat := time.Now()
	var recv deadlineCtx
	defer recv.stop()
	for {
		select {
		case err := <-fatal:
			c.shutdown(conn)
			return fmt.Errorf("kafka: %w", err)
		default:
		}
		if ctx.Err() != nil {
			c.shutdown(conn)
			return nil
		}
		now := time.Now()
		if !now.Before(nextBeat) {
			c.heartbeat(ctx)
			nextBeat = now.Add(c.cfg.HeartbeatInterval)
		}
		if !now.Before(nextStatus) {
			if err := c.status(ctx, conn, false); err != nil {
				return err
			}
			nextStatus = now.Add(c.cfg.StatusInterval)
		}
		msg, err := conn.ReceiveMessage(recv.until(ctx, now.Add(pollEvery), nextStatus))
		if err != nil {
			if pgconn.Timeout(err) || ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("receive: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication error: %s", m.Message)
		case *pgproto3.CopyData:
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return fmt.Errorf("keepalive: %w", err)
				}
				// Between transactions, the keepalive's WAL end (the
				// walsender's sent position) is confirmable once everything
				// queued before it is acked: every transaction committed
				// before it has already been received. Without this, WAL
				// after the last published commit (a shutdown checkpoint,
				// unpublished writes) is never confirmed, and a fast
				// shutdown of Postgres waits for this connector forever.
				if tx == nil && ka.ServerWALEnd > 0 {
					c.acks.push(ka.ServerWALEnd, 0)
				}
				if ka.ReplyRequested {
					nextStatus = time.Now()
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return fmt.Errorf("xlog data: %w", err)
				}
				if tx, err = c.handle(ctx, x, tx); err != nil {
					return err
				}
			}
		}
	}
}

// pluginArgs are pgoutput's options: protocol 1, the publication, and the
// binary form unless Text.
func (c *Connector) pluginArgs() []string {
	args := []string{"proto_version '1'", "publication_names '" + strings.ReplaceAll(c.cfg.Publication, "'", "''") + "'"}
	if !c.cfg.Text {
		args = append(args, "binary 'true'")
	}
	return args
}

// deadlineCtx is one deadline context per status interval, not one per
// message: making one (a timer) for each of a spike's million messages
// cost the connector more CPU than reading them.
type deadlineCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	at     time.Time
}

func (d *deadlineCtx) until(parent context.Context, at, limit time.Time) context.Context {
	// The current deadline serves until it passes: one context per pollEvery
	// at most, not one per message.
	if at.After(limit) {
		at = limit
	}
	if d.ctx == nil || d.ctx.Err() != nil || d.at.After(limit) {
		d.stop()
		d.ctx, d.cancel = context.WithDeadline(parent, at)
		d.at = at
	}
	return d.ctx
}

func (d *deadlineCtx) stop() {
	if d.cancel != nil {
		d.cancel()
	}
}

// txn is a transaction being received: its changes are encoded as they
// arrive (pgoutput sends a transaction only once it committed, and its
// Begin carries the commit time) and produced at its Commit.
type txn struct {
	xid        uint32
	commitTime time.Time
	commitMs   int64
	commitUs   int64
	nowNs      int64  // when the connector read the transaction: the envelopes' ts_ms/us/ns
	lastCommit uint64 // the previous transaction's commit LSN: source.sequence's first entry
	recs       []*kgo.Record
	bufs       []*[]byte // each record's pooled buffer (nil for heartbeats)
}

func (c *Connector) handle(ctx context.Context, x pglogrepl.XLogData, tx *txn) (*txn, error) {
	if len(x.WALData) > 0 {
		// Row changes, nearly every message, are read in place.
		switch x.WALData[0] {
		case 'I', 'U', 'D':
			return tx, c.change(tx, x.WALData, x.WALStart)
		}
	}
	msg, err := pglogrepl.Parse(x.WALData)
	if err != nil {
		return tx, fmt.Errorf("parse pgoutput: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		r := &envelope.Relation{Schema: m.Namespace, Table: m.RelationName}
		for _, col := range m.Columns {
			r.Columns = append(r.Columns, envelope.Column{Name: col.Name, OID: col.DataType, Key: col.Flags&1 == 1})
		}
		if !c.cfg.Text {
			// A column the encoder could not read would fail its first
			// change; refused here, it names the column before any is read.
			if err := envelope.CheckBinary(r); err != nil {
				return tx, err
			}
		}
		r.Prepare(c.cfg.Source)
		if c.ann != nil && r.Table == "payments" {
			if err := c.ann.bind(r); err != nil {
				return tx, err
			}
		}
		c.rels[m.RelationID] = r
	case *pglogrepl.BeginMessage:
		return &txn{xid: m.Xid, commitTime: m.CommitTime, commitMs: m.CommitTime.UnixMilli(), commitUs: m.CommitTime.UnixMicro(),
			nowNs: time.Now().UnixNano(), lastCommit: uint64(c.lastCommit)}, nil
	case *pglogrepl.CommitMessage:
		if tx == nil {
			return nil, errors.New("commit without begin")
		}
		c.publish(ctx, tx, m.TransactionEndLSN)
		c.lastCommit = m.CommitLSN
		return nil, nil
	}
	return tx, nil
}

// change encodes an Insert, Update or Delete message into a record (key
// and envelope share one pooled buffer, returned once Kafka acked it).
func (c *Connector) change(tx *txn, m []byte, lsn pglogrepl.LSN) error {
	if tx == nil {
		return errors.New("change outside a transaction")
	}
	if len(m) < 6 {
		return fmt.Errorf("parse pgoutput: %w", errShort)
	}
	relID := binary.BigEndian.Uint32(m[1:5])
	r, ok := c.rels[relID]
	if !ok {
		return fmt.Errorf("change for unknown relation %d", relID)
	}
	var (
		op            byte
		before, after []envelope.Datum
		err           error
	)
	rest := m[5:]
	switch m[0] {
	case 'I':
		op = 'c'
		if rest[0] != 'N' {
			return fmt.Errorf("parse pgoutput: insert without a new tuple")
		}
		after, _, err = readTuple(rest[1:], c.after[:0])
	case 'U':
		op = 'u'
		if rest[0] == 'K' || rest[0] == 'O' {
			kind := rest[0]
			var old []envelope.Datum
			old, rest, err = readTuple(rest[1:], c.before[:0])
			if err != nil {
				return fmt.Errorf("parse pgoutput: %w", err)
			}
			if kind == 'O' { // the whole old row (REPLICA IDENTITY FULL)
				before = old
			}
			if len(rest) == 0 {
				return fmt.Errorf("parse pgoutput: %w", errShort)
			}
		}
		if rest[0] != 'N' {
			return fmt.Errorf("parse pgoutput: update without a new tuple")
		}
		after, _, err = readTuple(rest[1:], c.after[:0])
	case 'D':
		op = 'd'
		if rest[0] != 'K' && rest[0] != 'O' {
			return fmt.Errorf("parse pgoutput: delete without an old tuple")
		}
		before, _, err = readTuple(rest[1:], c.before[:0])
	}
	if err != nil {
		return fmt.Errorf("parse pgoutput: %w", err)
	}
	if before != nil {
		c.before = before
	}
	if after != nil {
		c.after = after
	}
	if r.Table == "cdc_heartbeat" {
		tx.recs = append(tx.recs, &kgo.Record{Topic: c.cfg.HeartbeatTopic, Key: []byte(fmt.Sprintf(`{"serverName":%q}`, c.cfg.Source.Name)),
			Value: []byte(fmt.Sprintf(`{"ts_ms":%d}`, tx.commitMs))})
		tx.bufs = append(tx.bufs, nil)
		return nil
	}
	bp := bufPool.Get().(*[]byte)
	key := after
	if key == nil {
		key = before
	}
	appendKey, appendValue := envelope.AppendKey, envelope.AppendValue
	if c.cfg.Schemas {
		appendKey, appendValue = envelope.AppendSchemaKey, envelope.AppendSchemaValue
	}
	b, err := appendKey((*bp)[:0], r, key)
	if err != nil {
		return err
	}
	k := len(b)
	if b, err = appendValue(b, r, op, before, after, uint64(lsn), tx.lastCommit, tx.xid, tx.commitUs, tx.nowNs); err != nil {
		return err
	}
	*bp = b
	tx.recs = append(tx.recs, &kgo.Record{Topic: r.Topic(), Key: b[:k:k], Value: b[k:]})
	tx.bufs = append(tx.bufs, bp)
	if op == 'u' && c.ann != nil {
		if vals := c.ann.derive(r, after); vals != nil {
			// The attempt row this change announces: its insert, at this
			// change's position in the stream.
			bp := bufPool.Get().(*[]byte)
			b, err := appendKey((*bp)[:0], c.ann.rel, vals)
			if err != nil {
				return err
			}
			k := len(b)
			if b, err = appendValue(b, c.ann.rel, 'c', nil, vals, uint64(lsn), tx.lastCommit, tx.xid, tx.commitUs, tx.nowNs); err != nil {
				return err
			}
			*bp = b
			tx.recs = append(tx.recs, &kgo.Record{Topic: c.ann.rel.Topic(), Key: b[:k:k], Value: b[k:]})
			tx.bufs = append(tx.bufs, bp)
		}
	}
	return nil
}

// bufPool holds record buffers (key and envelope): a payments update is
// about 1.3 KB.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// publish produces a committed transaction's events; the transaction's end
// LSN becomes acknowledgeable once Kafka has acked all of them and every
// earlier transaction.
func (c *Connector) publish(ctx context.Context, tx *txn, end pglogrepl.LSN) {
	entry := c.acks.push(end, len(tx.recs))
	commit := tx.commitTime
	for i, rec := range tx.recs {
		bp := tx.bufs[i]
		c.kafk.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				c.acks.fail(err)
				return
			}
			if bp != nil {
				c.m.events.Inc()
				c.m.lag.Observe(time.Since(commit).Seconds())
				bufPool.Put(bp) // Kafka has acked: nothing reads it any more
			}
			c.acks.done(entry)
		})
	}
}

// status reports the acknowledged LSN to Postgres, which may then recycle
// WAL up to it.
func (c *Connector) status(ctx context.Context, conn *pgconn.PgConn, final bool) error {
	lsn := c.acks.acked()
	// Recorded before it is confirmed: the slot is then never ahead of
	// cdc_state, which is how a recreated slot is told apart (checkSlot).
	if lsn > c.recorded {
		if err := c.record(ctx, lsn); err != nil {
			if final {
				return nil
			}
			c.log.Warn("not confirming this time", "err", err)
			return nil
		}
		c.recorded = lsn
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn, ClientTime: time.Now()})
	if err != nil && !final {
		return fmt.Errorf("status update: %w", err)
	}
	if lag, err := cdcdb.New(c.db).SlotLagBytes(ctx, c.cfg.Slot); err == nil {
		c.m.slotLag.Set(float64(lag))
	}
	return nil
}

// heartbeat writes the heartbeat row; the change comes back through the
// slot as its own transaction and becomes a heartbeat event.
func (c *Connector) heartbeat(ctx context.Context) {
	if err := cdcdb.New(c.db).Heartbeat(ctx); err != nil && ctx.Err() == nil {
		c.log.Warn("heartbeat write", "err", err)
	}
}

func (c *Connector) shutdown(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.kafk.Flush(ctx); err != nil {
		c.log.Warn("flush on shutdown", "err", err)
	}
	_ = c.status(ctx, conn, true)
	c.log.Info("cdc stopped", "acked_lsn", c.acks.acked().String())
}

// ackQueue tracks committed transactions in commit order until Kafka has
// acked all their events.
type ackQueue struct {
	mu      sync.Mutex
	pending []*ackEntry
	lsn     pglogrepl.LSN
	onFail  func(error)
}

type ackEntry struct {
	end       pglogrepl.LSN
	remaining int
}

func (q *ackQueue) push(end pglogrepl.LSN, n int) *ackEntry {
	q.mu.Lock()
	defer q.mu.Unlock()
	e := &ackEntry{end: end, remaining: n}
	q.pending = append(q.pending, e)
	q.advance()
	return e
}

func (q *ackQueue) done(e *ackEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	e.remaining--
	q.advance()
}

func (q *ackQueue) advance() {
	for len(q.pending) > 0 && q.pending[0].remaining == 0 {
		q.lsn = max(q.lsn, q.pending[0].end)
		q.pending = q.pending[1:]
	}
}

func (q *ackQueue) acked() pglogrepl.LSN {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lsn
}

func (q *ackQueue) fail(err error) {
	if q.onFail != nil {
		q.onFail(err)
	}
}
