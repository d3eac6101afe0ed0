package cdc_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/cdc"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	paymentpkg "github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/kafkatest"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var update = flag.Bool("update", false, "rewrite golden files")

func tuple(vals ...string) *pglogrepl.TupleData {
	t := &pglogrepl.TupleData{}
	for _, v := range vals {
		if v == "<null>" {
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'n'})
			continue
		}
		t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 't', Data: []byte(v)})
	}
	t.ColumnNum = uint16(len(t.Columns))
	return t
}

// TestGoldenEnvelopes pins one create and one update envelope of payments.
func TestGoldenEnvelopes(t *testing.T) {
	rel := &envelope.Relation{Schema: "public", Table: "payments", Columns: []envelope.Column{
		{Name: "id", OID: 2950}, {Name: "payer", OID: 25}, {Name: "amount_minor", OID: 20}, {Name: "currency", OID: 1042},
		{Name: "due_time", OID: 1184}, {Name: "status", OID: 25}, {Name: "attempt", OID: 23}, {Name: "gateway_ref", OID: 25},
		{Name: "metadata", OID: 3802},
	}}
	id := "01a22b54-7abf-79b7-b1b6-bd55c481e1fa"
	beforeVals := []string{id, "alice", "1500", "USD", "2026-12-01 09:00:00+00", "PENDING", "0", "<null>", `{"k": "v"}`}
	afterVals := []string{id, "alice", "1500", "USD", "2026-12-01 09:00:00+00", "PROCESSING", "1", "<null>", `{"k": "v"}`}
	commit := time.Date(2026, 12, 1, 9, 0, 0, 123_456_000, time.UTC)
	now := time.Date(2026, 12, 1, 9, 0, 0, 456_789_012, time.UTC)
	src := envelope.Source{Name: "paysched", DB: "paysched"}
	// The same rows in pgoutput's text form and in its binary form (binary
	// 'true') give the same envelopes, byte for byte.
	for _, form := range []string{"text", "binary"} {
		before, after := tuple(beforeVals...), tuple(afterVals...)
		if form == "binary" {
			before, after = binaryTuple(t, rel, beforeVals...), binaryTuple(t, rel, afterVals...)
		}
		for name, ch := range map[string]cdc.Change{
			"create": {Rel: rel, Op: "c", After: before, LSN: 24023128, LastCommit: 24022984, TxID: 771, CommitTime: commit},
			"update": {Rel: rel, Op: "u", Before: before, After: after, LSN: 24023400, LastCommit: 24023312, TxID: 772, CommitTime: commit},
		} {
			key, err := cdc.Key(ch)
			if err != nil {
				t.Fatal(err)
			}
			val, err := cdc.Value(ch, src, now)
			if err != nil {
				t.Fatal(err)
			}
			var pretty map[string]any
			if err := json.Unmarshal(val, &pretty); err != nil {
				t.Fatalf("%s: envelope is not JSON: %v\n%s", name, err, val)
			}
			skey, err := cdc.SchemaKey(ch, src)
			if err != nil {
				t.Fatal(err)
			}
			sval, err := cdc.SchemaValue(ch, src, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(sval, &pretty); err != nil {
				t.Fatalf("%s: schema-ful envelope is not JSON: %v\n%s", name, err, sval)
			}
			for file, got := range map[string][]byte{
				name + ".golden":        append(append(key, '\n'), val...),
				name + ".schema.golden": append(append(skey, '\n'), sval...),
			} {
				path := "testdata/" + file
				if *update {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Errorf("%s (%s form) changed:\n got %s\nwant %s", file, form, got, want)
				}
			}
		}
	}
}

// binaryTuple is tuple in pgoutput's binary form: each value, given as
// Postgres's text output, in its type's binary encoding (the send
// function's), for the types envelope.BinaryTypes names.
func binaryTuple(t *testing.T, rel *envelope.Relation, vals ...string) *pglogrepl.TupleData {
	t.Helper()
	out := &pglogrepl.TupleData{ColumnNum: uint16(len(vals))}
	for i, v := range vals {
		if v == "<null>" {
			out.Columns = append(out.Columns, &pglogrepl.TupleDataColumn{DataType: 'n'})
			continue
		}
		var d []byte
		switch oid := rel.Columns[i].OID; oid {
		case 2950:
			u, err := uuid.Parse(v)
			if err != nil {
				t.Fatal(err)
			}
			d = u[:]
		case 20, 23, 21:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			switch oid {
			case 20:
				d = binary.BigEndian.AppendUint64(nil, uint64(n))
			case 23:
				d = binary.BigEndian.AppendUint32(nil, uint32(int32(n)))
			default:
				d = binary.BigEndian.AppendUint16(nil, uint16(int16(n)))
			}
		case 16:
			d = []byte{map[bool]byte{true: 1, false: 0}[v == "t"]}
		case 1184:
			ts, err := time.Parse("2006-01-02 15:04:05.999999Z07", v)
			if err != nil {
				t.Fatal(err)
			}
			d = binary.BigEndian.AppendUint64(nil, uint64(ts.UnixMicro()-time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()))
		case 3802:
			d = append([]byte{1}, v...)
		case 25, 1042, 1043:
			d = []byte(v)
		default:
			t.Fatalf("no binary form for oid %d in this test", oid)
		}
		out.Columns = append(out.Columns, &pglogrepl.TupleDataColumn{DataType: 'b', Data: d})
	}
	return out
}

func payment(due time.Time) store.NewPayment {
	id, _ := uuid.NewV7()
	return store.NewPayment{ID: id, Payer: "alice", Payee: "bob", Amount: 100, Currency: "USD", DueAt: due,
		CreatedAt: time.Now(), IdempotencyKey: id.String(), RequestHash: []byte{1}, Response: []byte{1}}
}

// startConnector sets up and runs a connector on slot until the test ends;
// the context it returns ends with it.
func startConnector(t *testing.T, db *pgxpool.Pool, seeds []string, slot string, status, heartbeat time.Duration, opts ...func(*cdc.Config)) context.Context {
	return startConnectorAt(t, db, db.Config().ConnString(), seeds, slot, status, heartbeat, opts...)
}

// startConnectorAt streams from url (db's database, reached another way).
func startConnectorAt(t *testing.T, db *pgxpool.Pool, url string, seeds []string, slot string, status, heartbeat time.Duration, opts ...func(*cdc.Config)) context.Context {
	t.Helper()
	cfg := cdc.Config{DatabaseURL: url, Slot: slot, Publication: "paysched",
		Source: envelope.Source{Name: "paysched", DB: db.Config().ConnConfig.Database}, Brokers: seeds,
		HeartbeatTopic: kafka.DefaultTopics.Heartbeat, StatusInterval: status, HeartbeatInterval: heartbeat,
		// As in production: a failover slot where the server has them (17+),
		// the older command on older servers.
		Failover: true}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := cdc.New(cfg, db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = <-done; c.Close() })
	return ctx
}

type event struct {
	Before, After map[string]any
	Op            string
	Source        struct {
		Table    string
		LSN      uint64 `json:"lsn"`
		Sequence string `json:"sequence"`
	}
}

// TestStreamsEveryChangeInOrder: creates and cancels reach Kafka, per
// payment in commit order, with whole rows before and after.
func TestStreamsEveryChangeInOrder(t *testing.T) {
	db := pgtest.NewPool(t)
	seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Heartbeat)
	ctx := startConnector(t, db, seeds, "test_slot", 200*time.Millisecond, time.Second)

	st := store.NewStore(db)
	var items []store.NewPayment
	for range 100 {
		items = append(items, payment(time.Now().Add(time.Hour)))
	}
	if _, err := st.Create(ctx, items); err != nil {
		t.Fatal(err)
	}
	for _, it := range items[:40] {
		if _, err := st.Cancel(ctx, "alice", it.ID); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(kafka.DefaultTopics.Payments),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	perPayment := map[string][]event{}
	total := 0
	deadline := time.Now().Add(30 * time.Second)
	for total < 140 && time.Now().Before(deadline) {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		fs.EachRecord(func(r *kgo.Record) {
			var e event
			if err := json.Unmarshal(r.Value, &e); err != nil {
				t.Fatalf("bad envelope: %v %s", err, r.Value)
			}
			var key struct{ ID string }
			_ = json.Unmarshal(r.Key, &key)
			perPayment[key.ID] = append(perPayment[key.ID], e)
			total++
		})
	}
	if total != 140 {
		t.Fatalf("got %d events, want 140 (100 creates, 40 cancels)", total)
	}
	for _, it := range items[:40] {
		evs := perPayment[it.ID.String()]
		if len(evs) != 2 || evs[0].Op != "c" || evs[1].Op != "u" || evs[1].Source.LSN <= evs[0].Source.LSN {
			t.Fatalf("payment %s events out of order: %+v", it.ID, evs)
		}
		// REPLICA IDENTITY DEFAULT: an update carries no before image, as
		// Debezium's events under it; the status it left is prev_status.
		if evs[1].Before != nil || evs[1].After["prev_status"] != "PENDING" || evs[1].After["status"] != "CANCELLED" ||
			evs[0].After["prev_status"] != nil || evs[0].After["amount_minor"] != float64(100) {
			t.Fatalf("envelope content: %+v", evs[1])
		}
		// source.sequence is Debezium's [last committed LSN, this LSN].
		// The first is always known (the slot's position, then each
		// commit's) but may exceed the second: a transaction that began
		// before another committed is decoded after it. What Debezium
		// promises, and consumers rely on, is that the pair orders a key's
		// events: it grows lexicographically in stream order.
		var prev [2]uint64
		for _, e := range evs {
			var seq []*string
			if err := json.Unmarshal([]byte(e.Source.Sequence), &seq); err != nil || len(seq) != 2 || seq[0] == nil || seq[1] == nil {
				t.Fatalf("sequence %q: want two LSNs", e.Source.Sequence)
			}
			last, _ := strconv.ParseUint(*seq[0], 10, 64)
			cur, _ := strconv.ParseUint(*seq[1], 10, 64)
			if last == 0 || cur != e.Source.LSN {
				t.Fatalf("sequence %q for lsn %d", e.Source.Sequence, e.Source.LSN)
			}
			if last < prev[0] || (last == prev[0] && cur <= prev[1]) {
				t.Fatalf("sequence %q does not follow %v", e.Source.Sequence, prev)
			}
			prev = [2]uint64{last, cur}
		}
	}
	// The slot moves: what Kafka acked is confirmed to Postgres.
	time.Sleep(time.Second)
	var confirmed string
	if err := db.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'test_slot'`).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	lsn, _ := pglogrepl.ParseLSN(confirmed)
	var maxLSN uint64
	for _, evs := range perPayment {
		for _, e := range evs {
			maxLSN = max(maxLSN, e.Source.LSN)
		}
	}
	if uint64(lsn) < maxLSN {
		t.Fatalf("slot confirmed %s, behind the last event %d", confirmed, maxLSN)
	}
}

// TestSchemaFormStreams: with Schemas on, keys and envelopes carry
// Debezium's JsonConverter schema, and our readers read them as the
// schemaless form.
func TestSchemaFormStreams(t *testing.T) {
	db := pgtest.NewPool(t)
	seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Heartbeat)
	ctx := startConnector(t, db, seeds, "schema_slot", 200*time.Millisecond, time.Second, func(c *cdc.Config) { c.Schemas = true })
	items := []store.NewPayment{payment(time.Now().Add(time.Hour)), payment(time.Now().Add(time.Hour))}
	if _, err := store.NewStore(db).Create(ctx, items); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(kafka.DefaultTopics.Payments),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]bool{}
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	kafkatest.Drain(dctx, cl, func() bool { return len(got) >= len(items) }, func(r *kgo.Record) {
		var key struct {
			Schema  struct{ Name string }
			Payload struct{ ID string }
		}
		var val struct {
			Schema struct {
				Name   string
				Fields []struct{ Field, Name string }
			}
		}
		if err := json.Unmarshal(r.Key, &key); err != nil || key.Schema.Name != "paysched.public.payments.Key" || key.Payload.ID == "" {
			t.Fatalf("key %s: %v", r.Key, err)
		}
		if err := json.Unmarshal(r.Value, &val); err != nil || val.Schema.Name != "paysched.public.payments.Envelope" || len(val.Schema.Fields) != 8 {
			t.Fatalf("value schema: %v %s", err, r.Value[:min(len(r.Value), 300)])
		}
		e, err := envelope.Parse(r.Value)
		if err != nil || e.Op != "c" || e.Source.Table != "payments" || e.Source.LSN == 0 || e.Source.TsMs == 0 {
			t.Fatalf("Parse of the schema-ful form: %+v %v", e, err)
		}
		f, err := envelope.DecodeChange(r.Value)
		if err != nil || f.After["id"] != key.Payload.ID || f.Op != "c" {
			t.Fatalf("DecodeChange of the schema-ful form: %+v %v", f, err)
		}
		if ts, ok := envelope.SourceTsMs(r.Value); !ok || ts != e.Source.TsMs {
			t.Fatalf("SourceTsMs %d %v, want %d", ts, ok, e.Source.TsMs)
		}
		got[key.Payload.ID] = true
	})
	if len(got) != len(items) {
		t.Fatalf("read %d payments' creates, want %d", len(got), len(items))
	}
}

// TestSlotGapIsRefusedThenResynced: a slot dropped (or recreated) behind
// cdc's back makes it refuse to stream, naming the gap; --resync recreates
// the slot and emits snapshot events for what changed meanwhile.
func TestSlotGapIsRefusedThenResynced(t *testing.T) {
	db := pgtest.NewPool(t)
	seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Actions, kafka.DefaultTopics.Heartbeat)
	ctx := context.Background()
	newConn := func(resync bool) *cdc.Connector {
		c, err := cdc.New(cdc.Config{DatabaseURL: db.Config().ConnString(), Slot: "gap_slot", Publication: "paysched",
			Source: envelope.Source{Name: "paysched", DB: db.Config().ConnConfig.Database}, Brokers: seeds,
			HeartbeatTopic: kafka.DefaultTopics.Heartbeat, StatusInterval: 100 * time.Millisecond, HeartbeatInterval: time.Second, Resync: resync},
			db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	// A first run streams and confirms.
	c := newConn(false)
	if err := c.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	st := store.NewStore(db)
	if _, err := st.Create(ctx, []store.NewPayment{payment(time.Now().Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	stop()
	_ = <-done
	// The slot goes away (a failover that did not carry it), and a payment
	// is created meanwhile: its change is in no slot. (The walsender may
	// hold the slot for a moment after the connector has gone.)
	for deadline := time.Now().Add(10 * time.Second); ; {
		var active bool
		if err := db.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = 'gap_slot'`).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot stayed active after the connector stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot('gap_slot')`); err != nil {
		t.Fatal(err)
	}
	lost := payment(time.Now().Add(time.Hour))
	if _, err := st.Create(ctx, []store.NewPayment{lost}); err != nil {
		t.Fatal(err)
	}
	err := newConn(false).Setup(ctx)
	if !errors.Is(err, cdc.ErrGap) || !strings.Contains(err.Error(), "--resync") {
		t.Fatalf("missing slot: %v, want a gap naming --resync", err)
	}
	// Recreated behind cdc's back: still a gap.
	if _, err := db.Exec(ctx, `SELECT pg_create_logical_replication_slot('gap_slot', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	if err := newConn(false).Setup(ctx); !errors.Is(err, cdc.ErrGap) {
		t.Fatalf("recreated slot: %v, want a gap", err)
	}
	// --resync: the lost payment comes as a snapshot event, as it was at
	// the new slot's position; a change made after the slot was made and
	// before the resync read the rows (the hook) comes once, in the stream
	// after it. Read at a later snapshot, the row came as already
	// cancelled, and its cancel came again after it.
	rc := newConn(true)
	cdc.SetBeforeResync(rc, func(ctx context.Context) {
		if _, err := db.Exec(ctx, `UPDATE payments SET status = 'CANCELLED', updated_at = now() WHERE id = $1`, lost.ID); err != nil {
			t.Error(err)
		}
	})
	if err := rc.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, stop = context.WithCancel(ctx)
	go func() { done <- rc.Run(rctx) }()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(kafka.DefaultTopics.Payments),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var seen []envelope.Change
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	kafkatest.Drain(dctx, cl, func() bool { return len(seen) >= 2 }, func(r *kgo.Record) {
		f, err := envelope.DecodeChange(r.Value)
		if err != nil || f.After["id"] != lost.ID.String() {
			return
		}
		if f.Op == "r" && !bytes.Contains(r.Value, []byte(`"snapshot":"true"`)) {
			t.Errorf("snapshot event without snapshot=true: %s", r.Value)
		}
		seen = append(seen, f)
	})
	stop()
	_ = <-done
	if len(seen) != 2 || seen[0].Op != "r" || seen[0].After["status"] != "PENDING" || seen[1].Op != "u" ||
		seen[1].After["status"] != "CANCELLED" || seen[1].Source.LSN <= seen[0].Source.LSN {
		var got []string
		for _, f := range seen {
			got = append(got, fmt.Sprintf("%s %v @%d", f.Op, f.After["status"], f.Source.LSN))
		}
		t.Fatalf("the payment made in the gap: %v, want its snapshot (r PENDING) then its cancel (u CANCELLED) after it", got)
	}
	if err := newConn(false).Setup(ctx); err != nil {
		t.Fatalf("after the resync the slot agrees with cdc_state: %v", err)
	}
}

// TestStreamsWithLeastPrivilege: over TLS and SCRAM-SHA-512, as a user
// granted only kafka.CDCAccess (what deploy/k8s's KafkaUser grants), the
// connector streams the changes and its heartbeats.
func TestStreamsWithLeastPrivilege(t *testing.T) {
	db := pgtest.NewPool(t)
	const user = "paysched-cdc"
	s := kafkatest.NewSecureCluster(t, map[string][]kafka.Grant{user: kafka.CDCAccess(kafka.DefaultTopics)},
		kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Actions, kafka.DefaultTopics.Heartbeat)
	ctx := startConnector(t, db, s.Seeds, "secure_slot", 200*time.Millisecond, 200*time.Millisecond,
		func(c *cdc.Config) { c.KafkaOpts = s.Opts(t, user) })
	items := []store.NewPayment{payment(time.Now().Add(time.Hour)), payment(time.Now().Add(time.Hour)), payment(time.Now().Add(time.Hour))}
	if _, err := store.NewStore(db).Create(ctx, items); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.Seeds...), kgo.ConsumeTopics(kafka.DefaultTopics.Payments, kafka.DefaultTopics.Heartbeat),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, s.Opts(t, kafkatest.Admin)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	perTopic := map[string]int{}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Heartbeats never stop: poll until both have arrived, not until quiet.
	for dctx.Err() == nil && (perTopic[kafka.DefaultTopics.Payments] < len(items) || perTopic[kafka.DefaultTopics.Heartbeat] == 0) {
		cl.PollFetches(dctx).EachRecord(func(r *kgo.Record) { perTopic[r.Topic]++ })
	}
	if perTopic[kafka.DefaultTopics.Payments] < len(items) || perTopic[kafka.DefaultTopics.Heartbeat] == 0 {
		t.Fatalf("records per topic %v, want %d payment events and heartbeats", perTopic, len(items))
	}
}

// TestSlotOfAnotherDatabaseIsRefused: slot names are the cluster's. A cdc
// given the name of a slot another database streams from refuses at
// Setup, naming the slot and both databases, instead of failing later
// when replication starts (two test packages sharing a cluster once
// silently stopped each other's stream that way).
func TestSlotOfAnotherDatabaseIsRefused(t *testing.T) {
	seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Actions, kafka.DefaultTopics.Heartbeat)
	ctx := context.Background()
	setup := func(db *pgxpool.Pool) error {
		c, err := cdc.New(cdc.Config{DatabaseURL: db.Config().ConnString(), Slot: "shared_slot", Publication: "paysched",
			Source: envelope.Source{Name: "paysched", DB: db.Config().ConnConfig.Database}, Brokers: seeds,
			HeartbeatTopic: kafka.DefaultTopics.Heartbeat, StatusInterval: 100 * time.Millisecond, HeartbeatInterval: time.Second},
			db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.Setup(ctx)
	}
	first, second := pgtest.NewPool(t), pgtest.NewPool(t)
	if err := setup(first); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = first.Exec(context.Background(), `SELECT pg_drop_replication_slot('shared_slot')`) })
	err := setup(second)
	if err == nil || !strings.Contains(err.Error(), "shared_slot") || !strings.Contains(err.Error(), first.Config().ConnConfig.Database) {
		t.Fatalf("setup on another database's slot: %v, want a refusal naming the slot and its database", err)
	}
}

// TestBinaryAndTextFormsAgree: one connector reading pgoutput's binary
// form and one reading its text form write the same rows, byte for byte,
// for every column type the captured tables use (timestamps to the
// microsecond and before 2000, jsonb, unicode, nulls, negative numbers).
func TestBinaryAndTextFormsAgree(t *testing.T) {
	db := pgtest.NewPool(t)
	bin, txt := kafka.TopicsFor("bin"), kafka.TopicsFor("txt")
	seeds := kafkatest.NewCluster(t, bin.Payments, bin.Attempts, bin.Actions, bin.Heartbeat,
		txt.Payments, txt.Attempts, txt.Actions, txt.Heartbeat)
	ctx := startConnector(t, db, seeds, "bin_slot", 200*time.Millisecond, time.Second, func(c *cdc.Config) {
		c.Source.Name, c.HeartbeatTopic = "bin", bin.Heartbeat
	})
	startConnector(t, db, seeds, "txt_slot", 200*time.Millisecond, time.Second, func(c *cdc.Config) {
		c.Source.Name, c.HeartbeatTopic, c.Text = "txt", txt.Heartbeat, true
	})
	due := time.Now().Add(time.Hour).Truncate(time.Hour)
	for i, sql := range []string{
		`INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, description, metadata, tenant)
		 VALUES ('01a22b54-7abf-79b7-b1b6-bd55c481e1fa', 'al"ice', 'bob é 😀 <&>', 9223372036854775807, 'EUR', $1::timestamptz, $1::timestamptz + interval '1.000001 s',
		         'line1' || chr(10) || 'tab' || chr(9), '{"k": ["v", 1.5, null, {"é": true}]}', 'tenant\x')`,
		`UPDATE payments SET status = 'PROCESSING', attempt = 1, lease_until = '1999-12-31 23:59:59.999999+00',
		 lease_owner = 'sw', probe_first = true, releases = 3, retries = 2 WHERE id = '01a22b54-7abf-79b7-b1b6-bd55c481e1fa'`,
		`INSERT INTO payment_attempts (payment_id, attempt, started_at, finished_at, gateway_key, outcome, gateway_ref, error, executor_id)
		 VALUES ('01a22b54-7abf-79b7-b1b6-bd55c481e1fa', 1, $1::timestamptz, $1::timestamptz + interval '0.5 s', 'k', 'AMBIGUOUS', NULL, 'x' || chr(1), 'ex')`,
		`UPDATE payments SET status = 'DEAD_LETTERED', dead_letter_reason = 'AMBIGUOUS_UNRESOLVED', last_error = '',
		 lease_until = NULL, lease_owner = NULL WHERE id = '01a22b54-7abf-79b7-b1b6-bd55c481e1fa'`,
		`INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason, run_id)
		 VALUES ('01a22b54-7abf-79b7-b1b6-bd55c481e1fa', 'admin:x', 'redrive', 'DEAD_LETTERED', 'PENDING', 'why', -5)`,
	} {
		var err error
		if strings.Contains(sql, "$1") {
			_, err = db.Exec(ctx, sql, due)
		} else {
			_, err = db.Exec(ctx, sql)
		}
		if err != nil {
			t.Fatalf("statement %d: %v", i, err)
		}
	}
	// Each topic's rows, keyed by LSN: both connectors read one WAL.
	rows := func(topics ...string) map[string]string {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		out := map[string]string{}
		deadline := time.Now().Add(30 * time.Second)
		for len(out) < 5 && time.Now().Before(deadline) {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) {
				var e struct {
					Before, After json.RawMessage
					Source        struct {
						Table string
						LSN   uint64
					}
				}
				if err := json.Unmarshal(r.Value, &e); err != nil {
					t.Fatalf("bad envelope: %v %s", err, r.Value)
				}
				out[fmt.Sprint(e.Source.Table, "@", e.Source.LSN)] = string(r.Key) + " " + string(e.Before) + " " + string(e.After)
			})
		}
		return out
	}
	b, x := rows(bin.Payments, bin.Attempts, bin.Actions), rows(txt.Payments, txt.Attempts, txt.Actions)
	if len(b) != 5 || len(x) != 5 {
		t.Fatalf("events: binary %d, text %d, want 5 each", len(b), len(x))
	}
	for k, v := range x {
		if b[k] != v {
			t.Errorf("%s:\n binary %s\n text   %s", k, b[k], v)
		}
	}
}

// TestAnnouncedAttemptsAreTheRows: the attempt events cdc derives from the
// payments changes that announce them are, key by key, the events of the
// rows themselves (a second connector publishing every attempt row shows
// them): the same after images byte for byte, the same ops, one event per
// change, also where the attempt row is written apart from its payment's
// move (a lease the reaper took back, then the late outcome that replaces
// its ABANDONED row, both published as rows).
func TestAnnouncedAttemptsAreTheRows(t *testing.T) {
	db := pgtest.NewPool(t)
	ann, all := kafka.TopicsFor("ann"), kafka.TopicsFor("all")
	seeds := kafkatest.NewCluster(t, ann.Payments, ann.Attempts, ann.Heartbeat, all.Payments, all.Attempts, all.Heartbeat)
	ctx := startConnector(t, db, seeds, "ann_slot", 200*time.Millisecond, time.Second, func(c *cdc.Config) {
		c.Source.Name, c.HeartbeatTopic = "ann", ann.Heartbeat
	})
	startConnector(t, db, seeds, "all_slot", 200*time.Millisecond, time.Second, func(c *cdc.Config) {
		c.Source.Name, c.HeartbeatTopic, c.Publication, c.PublishAttempts = "all", all.Heartbeat, "paysched_all", true
	})
	st := store.NewStore(db)
	var items []store.NewPayment
	for range 30 {
		items = append(items, payment(time.Now().Add(-time.Minute)))
	}
	if _, err := st.Create(ctx, items); err != nil {
		t.Fatal(err)
	}
	claimer := &store.Claimer{DB: db, Owner: "sw", Lease: time.Minute}
	claimed, err := claimer.Claim(ctx, 20)
	if err != nil || len(claimed) != 20 {
		t.Fatalf("claimed %d: %v", len(claimed), err)
	}
	var ts []store.Transition
	for i, c := range claimed {
		tr := store.Transition{ClaimRef: store.ClaimRef{ID: c.ID, DueTime: c.DueTime, Attempt: c.Attempt}, StartedAt: time.Now().Add(-time.Second)}
		switch i % 4 {
		case 0:
			tr.Outcome, tr.Status, tr.Ref = paymentpkg.Succeeded, paymentpkg.Completed, "ch_"+fmt.Sprint(i)
		case 1:
			tr.Outcome, tr.Status, tr.FailReason, tr.Error = paymentpkg.Declined, paymentpkg.Failed, paymentpkg.FailDeclined, "declined: é \"quoted\""
		case 2:
			tr.Outcome, tr.Status, tr.RunAt, tr.NewRetries, tr.Error = paymentpkg.Retryable, paymentpkg.Pending, time.Now().Add(time.Hour), 1, "unavailable"
		default:
			tr.Status, tr.Releases = paymentpkg.Pending, 1 // a release: no attempt
		}
		ts = append(ts, tr)
	}
	if _, err := store.Complete(ctx, db, "ex-1", ts); err != nil {
		t.Fatal(err)
	}
	// A lease the reaper takes back (its ABANDONED row), then the late
	// outcome of that attempt (fenced out; it replaces the ABANDONED row).
	short := &store.Claimer{DB: db, Owner: "sw", Lease: time.Millisecond}
	late, err := short.Claim(ctx, 5)
	if err != nil || len(late) != 5 {
		t.Fatalf("claimed %d: %v", len(late), err)
	}
	time.Sleep(50 * time.Millisecond)
	if n, err := store.ExpireLeases(ctx, db, 100); err != nil || n != 5 {
		t.Fatalf("expired %d: %v", n, err)
	}
	ts = ts[:0]
	for _, c := range late {
		ts = append(ts, store.Transition{ClaimRef: store.ClaimRef{ID: c.ID, DueTime: c.DueTime, Attempt: c.Attempt}, StartedAt: time.Now(),
			Outcome: paymentpkg.Succeeded, Status: paymentpkg.Completed, Ref: "ch_late"})
	}
	applied, err := store.Complete(ctx, db, "ex-2", ts)
	if err != nil || len(applied) != 0 {
		t.Fatalf("late outcomes applied %d (want 0, fenced): %v", len(applied), err)
	}
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM payment_attempts`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	type ev struct{ op, after string }
	read := func(topic string, want int) map[string][]ev {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		out, n := map[string][]ev{}, 0
		deadline := time.Now().Add(30 * time.Second)
		for n < want && time.Now().Before(deadline) {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) {
				var e struct {
					After json.RawMessage
					Op    string
				}
				if err := json.Unmarshal(r.Value, &e); err != nil {
					t.Fatalf("bad envelope: %v %s", err, r.Value)
				}
				out[string(r.Key)] = append(out[string(r.Key)], ev{e.Op, string(e.After)})
				n++
			})
		}
		time.Sleep(time.Second) // nothing more may come
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { out[string(r.Key)] = append(out[string(r.Key)], ev{"extra", string(r.Value)}) })
		pcancel()
		return out
	}
	// 15 outcomes (5 releases wrote none), 5 ABANDONED rows, 5 replacements.
	if rows != 20 {
		t.Fatalf("%d attempt rows, want 20", rows)
	}
	want := read(all.Attempts, 25)
	got := read(ann.Attempts, 25)
	if len(want) != 20 || len(got) != 20 {
		t.Fatalf("attempt keys: announced %d, published %d, want 20", len(got), len(want))
	}
	for k, w := range want {
		g := got[k]
		if len(g) != len(w) {
			t.Fatalf("%s: announced events %v, published %v", k, g, w)
		}
		for i := range w {
			if g[i] != w[i] {
				t.Errorf("%s event %d:\n announced %+v\n published %+v", k, i, g[i], w[i])
			}
		}
	}
}
