package schema_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/store/schema"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestAuditLogDatabase: the audit log's migrations make an append-only
// audit_events in a database of its own, run again as a no-op, and run
// harmlessly on the schedule's database, which has the table already.
func TestAuditLogDatabase(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewEmptyURL(t)
	if err := schema.CreateDatabase(ctx, url); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	for i, want := range []int{1, 0} {
		applied, err := schema.UpAudit(ctx, conn)
		if err != nil || len(applied) != want {
			t.Fatalf("run %d: applied %v, %v; want %d", i+1, applied, err, want)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO audit_events (lsn, table_name, row_key, op, payment_id, status, event, committed_at)
		VALUES (1, 'payments', 'k', 'c', gen_random_uuid(), 'PENDING', '{}', now())`); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{`UPDATE audit_events SET status = 'X'`, `DELETE FROM audit_events`, `TRUNCATE audit_events`} {
		if _, err := conn.Exec(ctx, stmt); err == nil {
			t.Errorf("%s was accepted on the append-only log", stmt)
		}
	}
	var schedule bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('payments') IS NOT NULL`).Scan(&schedule); err != nil || schedule {
		t.Fatalf("the audit log's database has the schedule's tables (%v)", err)
	}
	// On the schedule's own database (development may point both at one).
	sched := connect(t, pgtest.NewURL(t))
	if _, err := schema.UpAudit(ctx, sched); err != nil {
		t.Fatalf("audit migrations on the schedule's database: %v", err)
	}
}

// TestMoveAuditRows: an install's audit rows are copied into the audit
// log's database, once each: a second run, or rows the consumer wrote
// there meanwhile, add nothing; the copy is exact.
func TestMoveAuditRows(t *testing.T) {
	ctx := context.Background()
	from := connect(t, pgtest.NewURL(t))
	toURL := pgtest.NewEmptyURL(t)
	if err := schema.CreateDatabase(ctx, toURL); err != nil {
		t.Fatal(err)
	}
	to := connect(t, toURL)
	if _, err := schema.UpAudit(ctx, to); err != nil {
		t.Fatal(err)
	}
	const n = 2503 // past two batches of 1,000
	for i := range n {
		id := uuid.New()
		if _, err := from.Exec(ctx, `INSERT INTO audit_events (lsn, table_name, row_key, op, payment_id, status, event, committed_at)
			VALUES ($1, 'payments', $2, 'u', $3, 'COMPLETED', $4, $5)`, int64(1000+i/3), fmt.Sprint("k", i), id,
			fmt.Sprintf(`{"after":{"id":%q}}`, id), time.Now().Add(-time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// One row the consumer already wrote into the new database.
	if _, err := to.Exec(ctx, `INSERT INTO audit_events SELECT lsn, table_name, row_key, op, payment_id, status, event, committed_at, recorded_at
		FROM (VALUES (1000::bigint, 'payments', 'k0', 'u', NULL::uuid, 'COMPLETED', '{}', now(), now())) AS v(lsn, table_name, row_key, op, payment_id, status, event, committed_at, recorded_at)`); err != nil {
		t.Fatal(err)
	}
	moved, err := schema.MoveAuditRows(ctx, from, to, 1000)
	if err != nil || moved != n-1 {
		t.Fatalf("moved %d, %v; want %d", moved, err, n-1)
	}
	if again, err := schema.MoveAuditRows(ctx, from, to, 1000); err != nil || again != 0 {
		t.Fatalf("a second run moved %d, %v; want 0", again, err)
	}
	var diff int
	if err := to.QueryRow(ctx, `SELECT count(*) FROM audit_events`).Scan(&diff); err != nil || diff != n {
		t.Fatalf("%d rows in the audit log's database, want %d (%v)", diff, n, err)
	}
	// Exact: the same events, statuses, payments and times.
	sum := func(c *pgx.Conn) (s string) {
		if err := c.QueryRow(ctx, `SELECT md5(string_agg(concat_ws('|', lsn, table_name, row_key, op, payment_id, status, event, committed_at), ','
			ORDER BY lsn, table_name, row_key)) FROM audit_events WHERE row_key <> 'k0'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if sum(from) != sum(to) {
		t.Fatal("the copied rows differ from the originals")
	}
}
