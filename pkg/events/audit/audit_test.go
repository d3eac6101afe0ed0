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

	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store/schema"
	"github.com/paysched/paysched/test/kafkatest"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// change is the envelope of payment id's change at lsn to status.
func change(lsn int, id, status string) *kgo.Record {
	return &kgo.Record{Topic: kafka.DefaultTopics.Payments, Key: []byte(`{"id":"` + id + `"}`), Value: []byte(fmt.Sprintf(
		`{"before":null,"after":{"id":%q,"status":%q,"amount_minor":100},"source":{"table":"payments","lsn":%d,"ts_ms":%d},"op":"c","ts_ms":0}`,
		id, status, lsn, time.Now().UnixMilli()))}
}

func paymentUUID(i int) string { return fmt.Sprintf("00000000-0000-7000-8000-%012d", i) }

func newConsumer(t *testing.T, db *pgxpool.Pool, seeds []string) *Consumer {
	t.Helper()
	c, err := New(Config{Brokers: seeds, Group: "audit"}, db, nil, prometheus.NewRegistry(), quiet)
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
	if n := count(t, db, `SELECT count(*) FROM audit_events WHERE event::json->'after'->>'status' = 'PENDING' AND payment_id::text = row_key::json->>'id'`); n != 6 {
		t.Fatalf("%d rows with the event and its key, want 6", n)
	}
}

// A batch split over write streams: streams whose rows repeat changes
// already written fall back on their own while the others COPY, and every
// change is in the log once.
func TestWriteStreamsSplitABatch(t *testing.T) {
	db := pgtest.NewPool(t)
	c, err := New(Config{Brokers: kafkatest.NewCluster(t), Group: "audit", WriteStreams: 3}, db, nil, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var recs []*kgo.Record
	for i := range 1200 {
		recs = append(recs, change(1000+i, paymentUUID(i), "PENDING"))
	}
	// Rows 200..599 first: in the full batch below they fall in the first
	// two of its three streams of 400.
	if err := c.write(ctx, c.decode(recs[200:600])); err != nil {
		t.Fatal(err)
	}
	if err := c.write(ctx, c.decode(recs)); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM audit_events`); n != 1200 {
		t.Fatalf("%d audit rows, want 1200", n)
	}
	if n := count(t, db, `SELECT count(DISTINCT lsn) FROM audit_events WHERE lsn BETWEEN 1000 AND 2199`); n != 1200 {
		t.Fatalf("%d distinct changes, want 1200", n)
	}
}

// Offsets are committed only behind written audit rows: when a write
// fails, the consumer stops, and the failed change and everything after it
// come again to the next member of the group.
func TestNoCommitAheadOfAFailedWrite(t *testing.T) {
	db := pgtest.NewPool(t)
	seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Actions, kafka.DefaultTopics.Notifications)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The database refuses the change at lsn 666.
	if _, err := db.Exec(ctx, `CREATE FUNCTION refuse_666() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.lsn = 666 THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_666 BEFORE INSERT ON audit_events FOR EACH ROW EXECUTE FUNCTION refuse_666()`); err != nil {
		t.Fatal(err)
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(kafka.DefaultTopics.Payments))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// One key, so one partition and one order.
	key := paymentUUID(1)
	produce := func(lsn int) {
		r := change(lsn, key, "PENDING")
		if err := pr.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for lsn := 1; lsn <= 50; lsn++ {
		produce(lsn)
	}
	c := newConsumer(t, db, seeds)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	for count(t, db, `SELECT count(*) FROM audit_events`) < 50 {
		time.Sleep(20 * time.Millisecond)
	}
	produce(666)
	for lsn := 667; lsn <= 700; lsn++ {
		produce(lsn)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Run returned no error after a refused write")
		}
	case <-ctx.Done():
		t.Fatal("Run did not stop after a refused write")
	}
	c.Close()
	if n := count(t, db, `SELECT count(*) FROM audit_events WHERE lsn >= 666`); n != 0 {
		t.Fatalf("%d rows at or after the refused change were written", n)
	}
	// The group's next member starts at the refused change at the latest.
	next, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("audit"), kgo.ConsumeTopics(kafka.DefaultTopics.Payments),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	seen := map[int64]bool{}
	kafkatest.Drain(ctx, next, func() bool { return seen[700] }, func(r *kgo.Record) {
		e, err := envelope.Parse(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		seen[e.Source.LSN] = true
	})
	if !seen[666] {
		t.Fatal("the refused change was committed: the next member never saw it")
	}
}

// Every change of a stream larger than a poll is written once, and each
// creation is notified, through the pipelined stages.
func TestConsumeStream(t *testing.T) {
	db := pgtest.NewPool(t)
	seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Actions, kafka.DefaultTopics.Notifications)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(kafka.DefaultTopics.Payments))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	const n = 5000
	for i := range n {
		pr.Produce(ctx, change(1000+i, paymentUUID(i), "PENDING"), func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := pr.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, db, seeds)
	c.batch = 300
	c.copyBufs = make([][]byte, 2) // batches of 300 go out on two streams
	notes, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(kafka.DefaultTopics.Notifications),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer notes.Close()
	runUntilCreationsNotified(ctx, t, c, db, notes, n)
}

// runUntilCreationsNotified runs c until notes holds a creation
// notification for each of n payments, then until each has its audit row
// (a notification no longer waits for its row), and stops c cleanly.
func runUntilCreationsNotified(ctx context.Context, t *testing.T, c *Consumer, db *pgxpool.Pool, notes *kgo.Client, n int) {
	t.Helper()
	errc := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() { errc <- c.Run(rctx) }()
	created := map[string]bool{}
	kafkatest.Drain(ctx, notes, func() bool { return len(created) == n }, func(r *kgo.Record) {
		if header(r, "ce_type") == "paysched.payment.created" {
			created[string(r.Key)] = true
		}
	})
	rows := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if rows = count(t, db, `SELECT count(*) FROM audit_events`); rows >= n {
			break
		}
	}
	stop()
	err := <-errc
	if len(created) != n {
		t.Fatalf("%d creations notified, want %d", len(created), n)
	}
	if rows != n {
		t.Fatalf("%d audit rows, want %d", rows, n)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// The binary COPY stores each change as sent: key, op, payment id (or
// NULL), status, the event's exact text and the commit time; a payment id
// Postgres accepts in another spelling goes through INSERT.
func TestCopyStoresTheChangeAsSent(t *testing.T) {
	db := pgtest.NewPool(t)
	c := newConsumer(t, db, kafkatest.NewCluster(t))
	ctx := context.Background()
	commit := time.Date(2026, 12, 1, 9, 0, 0, 123_000_000, time.UTC)
	ev := func(table, row string, lsn int) *kgo.Record {
		return &kgo.Record{Key: []byte(fmt.Sprintf(`{"k":%d}`, lsn)), Value: []byte(fmt.Sprintf(
			`{"before":null,"after":%s,"source":{"table":%q,"lsn":%d,"ts_ms":%d},"op":"c"}`, row, table, lsn, commit.UnixMilli()))}
	}
	recs := []*kgo.Record{
		ev("payments", `{"id":"01a22b54-7abf-79b7-b1b6-bd55c481e1fa","status":"PEND\u00c9ING \"x\""}`, 1),
		ev("payment_attempts", `{"payment_id":"01A22B54-7ABF-79B7-B1B6-BD55C481E1FB","attempt":1}`, 2),
		ev("payment_actions", `{"payment_id":"01a22b54-7abf-79b7-b1b6-bd55c481e1fc","new_status":"PENDING"}`, 3),
		ev("other_table", `{"x":1}`, 4),
	}
	if err := c.write(ctx, c.decode(recs)); err != nil {
		t.Fatal(err)
	}
	check := func(lsn int, id, status any) {
		t.Helper()
		var gotID, gotStatus *string
		var key, op, event string
		var at time.Time
		if err := db.QueryRow(ctx, `SELECT payment_id::text, status, row_key, op, event::text, committed_at FROM audit_events WHERE lsn = $1`, lsn).
			Scan(&gotID, &gotStatus, &key, &op, &event, &at); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(deref(gotID)) != fmt.Sprint(id) || fmt.Sprint(deref(gotStatus)) != fmt.Sprint(status) || key != string(recs[lsn-1].Key) ||
			op != "c" || event != string(recs[lsn-1].Value) || !at.Equal(commit) {
			t.Errorf("lsn %d: %v %v %s %s %s %s", lsn, deref(gotID), deref(gotStatus), key, op, event, at)
		}
	}
	check(1, "01a22b54-7abf-79b7-b1b6-bd55c481e1fa", `PENDÉING "x"`)
	check(2, "01a22b54-7abf-79b7-b1b6-bd55c481e1fb", nil)
	check(3, "01a22b54-7abf-79b7-b1b6-bd55c481e1fc", "PENDING")
	check(4, nil, nil)
	// Another spelling of a uuid: Postgres parses it.
	recs = append(recs, ev("payments", `{"id":"{01a22b547abf79b7b1b6bd55c481e1fd}","status":"PENDING"}`, 5))
	if err := c.write(ctx, c.decode(recs[4:])); err != nil {
		t.Fatal(err)
	}
	check(5, "01a22b54-7abf-79b7-b1b6-bd55c481e1fd", "PENDING")
}

func deref(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestConsumeWithLeastPrivilege: over TLS and SCRAM-SHA-512, as a user
// granted only kafka.AuditAccess (what deploy/k8s's KafkaUser grants), the
// consumer joins its group, writes every change's audit row, publishes
// the notifications and commits.
func TestConsumeWithLeastPrivilege(t *testing.T) {
	db := pgtest.NewPool(t)
	const user, group = "paysched-audit", "audit"
	s := kafkatest.NewSecureCluster(t, map[string][]kafka.Grant{user: kafka.AuditAccess(kafka.DefaultTopics, group)},
		kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Actions, kafka.DefaultTopics.Notifications)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(s.Seeds...)}, opts...), s.Opts(t, kafkatest.Admin)...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	const n = 50
	pr := admin()
	for i := range n {
		if err := pr.ProduceSync(ctx, change(1000+i, paymentUUID(i), "PENDING")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	c, err := New(Config{Brokers: s.Seeds, Group: group, KafkaOpts: s.Opts(t, user)}, db, nil, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	notes := admin(kgo.ConsumeTopics(kafka.DefaultTopics.Notifications), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	runUntilCreationsNotified(ctx, t, c, db, notes, n)
}

// TestAuditLogInItsOwnDatabase: given the audit log's database, the
// consumer writes every change there, by COPY and by its fallback alike,
// and nothing into the schedule's.
func TestAuditLogInItsOwnDatabase(t *testing.T) {
	schedule := pgtest.NewPool(t)
	logURL := pgtest.NewEmptyURL(t)
	ctx := context.Background()
	if err := schema.CreateDatabase(ctx, logURL); err != nil {
		t.Fatal(err)
	}
	logDB, err := pgxpool.New(ctx, logURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(logDB.Close)
	conn, err := logDB.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.UpAudit(ctx, conn.Conn()); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	c, err := New(Config{Brokers: kafkatest.NewCluster(t), Group: "audit", WriteStreams: 2}, schedule, logDB, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, change(100+i, paymentUUID(i), "PENDING"))
	}
	if err := c.write(ctx, c.decode(recs[:6])); err != nil { // COPY
		t.Fatal(err)
	}
	if err := c.write(ctx, c.decode(recs)); err != nil { // a redelivery: the fallback
		t.Fatal(err)
	}
	if n := count(t, logDB, `SELECT count(*) FROM audit_events`); n != 10 {
		t.Fatalf("%d rows in the audit log's database, want 10", n)
	}
	if n := count(t, schedule, `SELECT count(*) FROM audit_events`); n != 0 {
		t.Fatalf("%d rows in the schedule's database, want none", n)
	}
}

// A notification goes out as soon as its change is read: while the audit
// log holds its rows back behind a backlog of due payments, the
// notification is already on its topic (they waited up to --max-defer
// behind the audit write before).
func TestNotificationsDoNotWaitForTheAuditLog(t *testing.T) {
	db := pgtest.NewPool(t)
	seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Actions, kafka.DefaultTopics.Notifications)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(kafka.DefaultTopics.Payments))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.ProduceSync(ctx, change(1, paymentUUID(1), "PENDING")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Brokers: seeds, Group: "audit", MaxDefer: time.Hour}, db, nil, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// The engine is behind, for as long as the test runs.
	c.overdue = func(context.Context, pgdb.DB, time.Duration) (bool, error) { return true, nil }
	notes, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(kafka.DefaultTopics.Notifications),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer notes.Close()
	rctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(rctx) }()
	got := false
	kafkatest.Drain(ctx, notes, func() bool { return got }, func(r *kgo.Record) { got = got || string(r.Key) == paymentUUID(1) })
	rows := count(t, db, `SELECT count(*) FROM audit_events`)
	stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !got {
		t.Fatal("no notification while the audit log was held back")
	}
	if rows != 0 {
		t.Fatalf("%d audit rows written while held back", rows)
	}
}
