// Package dbroles tests the per-service database roles of migration 0010:
// each service's role can run what that service runs, and is refused
// (SQLSTATE 42501) what it must not do.
package dbroles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/reconcile/reconciledb"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// roles are the group roles of migrations 0010, 0012 and 0023.
var roles = []string{"paysched_api", "paysched_admin", "paysched_sweeper", "paysched_executor", "paysched_reaper",
	"paysched_reconciler", "paysched_audit", "paysched_cdc", "paysched_webhooks"}

// env is one migrated database with a LOGIN member of every group role.
type env struct {
	url   string
	admin *pgxpool.Pool
	pools map[string]*pgxpool.Pool // by group role
	users map[string]string        // login user by group role
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{url: pgtest.NewURL(t), pools: map[string]*pgxpool.Pool{}, users: map[string]string{}}
	var err error
	if e.admin, err = pgxpool.New(ctx, e.url); err != nil {
		t.Fatalf("admin pool: %v", err)
	}
	t.Cleanup(e.admin.Close)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	for _, r := range roles {
		user := fmt.Sprintf("%s_login_%s", strings.TrimPrefix(r, "paysched_"), hex.EncodeToString(suffix))
		attrs := "LOGIN"
		if r == "paysched_cdc" {
			attrs += " REPLICATION" // attributes are not inherited: the login user has it (see 0010)
		}
		if _, err := e.admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s %s IN ROLE %s`, user, attrs, r)); err != nil {
			t.Fatalf("create %s: %v", user, err)
		}
		cfg, err := pgxpool.ParseConfig(e.url)
		if err != nil {
			t.Fatalf("parse url: %v", err)
		}
		cfg.ConnConfig.User = user
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("pool as %s: %v", user, err)
		}
		e.pools[r], e.users[r] = pool, user
		t.Cleanup(func() {
			pool.Close()
			// Cleanups run last-in first-out: the database is dropped after this.
			// A closed session's temporary objects go away just after it
			// ends, and hold the role until then.
			var err error
			for try := 0; try < 50; try++ {
				if _, err = e.admin.Exec(context.Background(), `DROP ROLE `+user); err == nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Errorf("drop %s: %v", user, err)
		})
	}
	return e
}

func TestServicesCanDoTheirWork(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	api := store.NewStore(e.pools["paysched_api"])
	due := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	var claimed []store.Claimed
	steps := []struct {
		role, name string
		run        func(db *pgxpool.Pool) error
	}{
		{"paysched_api", "create", func(*pgxpool.Pool) error {
			var in []store.NewPayment
			for i, id := range ids {
				in = append(in, store.NewPayment{ID: id, Payer: "alice", Payee: "bob", Amount: 100, Currency: "USD", DueAt: due,
					CreatedAt: time.Now(), IdempotencyKey: fmt.Sprint("k", i), RequestHash: []byte{1}, Response: []byte{2}})
			}
			_, err := api.Create(ctx, in)
			return err
		}},
		{"paysched_api", "replay", func(*pgxpool.Pool) error {
			_, found, err := api.Replay(ctx, "alice", "k0", []byte{1})
			if err == nil && !found {
				err = errors.New("key k0 not found")
			}
			return err
		}},
		{"paysched_api", "get with attempts", func(*pgxpool.Pool) error { _, err := api.Get(ctx, "alice", ids[0]); return err }},
		{"paysched_api", "list", func(*pgxpool.Pool) error { _, err := api.List(ctx, "alice", "", 0, 10); return err }},
		{"paysched_api", "cancel", func(*pgxpool.Pool) error { _, err := api.Cancel(ctx, "alice", ids[2]); return err }},
		{"paysched_api", "ensure partitions", func(db *pgxpool.Pool) error {
			_, err := store.EnsurePartitions(ctx, db, time.Now(), time.Now().AddDate(0, 0, 400))
			return err
		}},
		{"paysched_admin", "dead letters, audit history", func(db *pgxpool.Pool) error {
			if _, err := store.NewStore(db).DeadLetters(ctx, time.Time{}, uuid.Nil, 10); err != nil {
				return err
			}
			_, err := db.Exec(ctx, `SELECT * FROM audit_events LIMIT 1`)
			return err
		}},
		{"paysched_sweeper", "claim", func(db *pgxpool.Pool) error {
			var err error
			claimed, err = store.Claim(ctx, db, "sweeper-1", time.Minute, 10)
			if err == nil && len(claimed) != 2 {
				err = fmt.Errorf("claimed %d, want 2", len(claimed))
			}
			return err
		}},
		{"paysched_admin", "tenant limits, tenants", func(db *pgxpool.Pool) error {
			// Requested by one identity, applied by another's approval.
			reqs, err := approval.New(db, approval.Strict(), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				return err
			}
			id, err := reqs.RequestLimits(ctx, store.TenantLimits{Tenant: "alice", Weight: 2}, "test", approval.Identity{Operator: "idp#ada", Name: "ada"})
			if err != nil {
				return err
			}
			if err := reqs.DecideLimits(ctx, id, "alice", true, approval.Identity{Operator: "idp#bea", Name: "bea"}); err != nil {
				return err
			}
			_, _, err = store.ListTenants(ctx, db, "", 10)
			return err
		}},
		{"paysched_sweeper", "fair claim: walk, limits, shares, settle, tenant rate buckets", func(db *pgxpool.Pool) error {
			if _, err := store.LoadTenantLimits(ctx, db); err != nil {
				return err
			}
			c := &store.Claimer{DB: db, Owner: "sweeper-1", Lease: time.Minute}
			if _, err := c.DueTenants(ctx, store.TenantCursor{}, 10); err != nil {
				return err
			}
			if _, _, err := c.ClaimTenants(ctx, []store.Share{{Tenant: "nobody", Quota: 1}}); err != nil {
				return err
			}
			if err := c.SettleTenants(ctx, []string{"nobody"}); err != nil {
				return err
			}
			_, err := pacing.TakeEach(ctx, db, []pacing.Bucket{{Name: "tenant:alice", Rate: 5, Burst: 5}}, []int{1})
			return err
		}},
		{"paysched_sweeper", "release", func(db *pgxpool.Pool) error {
			n, err := store.Release(ctx, db, "sweeper-1", claimed[1:])
			if err == nil && n != 1 {
				err = fmt.Errorf("released %d, want 1", n)
			}
			return err
		}},
		{"paysched_sweeper", "rate bucket", func(db *pgxpool.Pool) error {
			b := pacing.Bucket{Name: "gateway", Rate: 10, Burst: 5}
			if _, err := b.Take(ctx, db, 2); err != nil {
				return err
			}
			return b.Refund(ctx, db, 1)
		}},
		{"paysched_executor", "load and complete", func(db *pgxpool.Pool) error {
			c := claimed[0]
			item := store.ClaimRef{ID: c.ID, DueTime: c.DueTime, Attempt: c.Attempt}
			ws, err := store.LoadClaimed(ctx, db, []store.ClaimRef{item})
			if err != nil || len(ws) != 1 {
				return fmt.Errorf("load: %d rows, %v", len(ws), err)
			}
			applied, err := store.Complete(ctx, db, "executor-1", []store.Transition{{ClaimRef: item,
				Outcome: payment.Succeeded, Ref: "ch_1", Status: payment.Completed}})
			if err == nil && len(applied) != 1 {
				err = fmt.Errorf("applied %d, want 1", len(applied))
			}
			return err
		}},
		{"paysched_reaper", "expire leases, count, keys", func(db *pgxpool.Pool) error {
			if _, err := store.ExpireLeases(ctx, db, 100); err != nil {
				return err
			}
			if _, err := store.OldestDueAge(ctx, db); err != nil {
				return err
			}
			if _, err := store.Count(ctx, db); err != nil {
				return err
			}
			_, _, err := store.ExpireKeys(ctx, db, 0, time.Now().Add(time.Hour), 100)
			return err
		}},
		{"paysched_reaper", "partition upkeep", func(db *pgxpool.Pool) error {
			now := time.Now()
			if _, err := store.EnsurePartitions(ctx, db, now, now.AddDate(0, 0, 400)); err != nil {
				return fmt.Errorf("ensure: %v", err)
			}
			// A day 40 days gone (the owner made it: ensure looks forward),
			// at noon UTC: partitions are UTC days, whatever the host's zone.
			y, m, d := now.UTC().Date()
			old := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).AddDate(0, 0, -40)
			if _, err := e.admin.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF payments FOR VALUES FROM ('%s') TO ('%s')`,
				store.Partition(old), old.Format(time.DateOnly), old.AddDate(0, 0, 1).Format(time.DateOnly))); err != nil {
				return err
			}
			// A day 41 days gone holding a HELD payment: it waits for an
			// operator, and its partition is kept.
			held := old.AddDate(0, 0, -1)
			if _, err := e.admin.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF payments FOR VALUES FROM ('%s') TO ('%s')`,
				store.Partition(held), held.Format(time.DateOnly), old.Format(time.DateOnly))); err != nil {
				return err
			}
			if _, err := e.admin.Exec(ctx, `INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status, tenant)
				VALUES (gen_random_uuid(), 'p', 'q', 1, 'USD', $1, $1, 'HELD', 't')`, held); err != nil {
				return err
			}
			if n, err := store.DropPartitionsBefore(ctx, db, old.AddDate(0, 0, 1)); err != nil || n != 1 {
				return fmt.Errorf("drop: %d, %v", n, err)
			}
			var kept bool
			if err := e.admin.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, store.Partition(held)).Scan(&kept); err != nil || !kept {
				return fmt.Errorf("the partition holding a HELD payment was dropped (%v)", err)
			}
			return nil
		}},
		{"paysched_reconciler", "runs, items, webhooks, probes", func(db *pgxpool.Pool) error {
			return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				var run int64
				if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_runs (day, triggered_by) VALUES (current_date, 'test') RETURNING id`).Scan(&run); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO reconciliation_items (run_id, kind, severity, reference) VALUES ($1, 'UNKNOWN_CHARGE', 'WARNING', 'x')`, run); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET state = 'SUCCEEDED', finished_at = now() WHERE id = $1`, run); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO webhook_events (event_id, charge_key) VALUES ('evt_1', $1) ON CONFLICT DO NOTHING`, ids[0].String()); err != nil {
					return err
				}
				// The run's temporary tables, as the reconciler makes them.
				if _, err := tx.Exec(ctx, reconciledb.ReportTables); err != nil {
					return err
				}
				if err := store.MatchSettled(ctx, tx, due, due); err != nil {
					return err
				}
				if err := store.RepairSettled(ctx, tx, run, "today", due, due); err != nil {
					return err
				}
				if _, err := store.CountCompleted(ctx, tx, due.AddDate(0, 0, -1), due, due.AddDate(0, 0, 1)); err != nil {
					return err
				}
				_, err := store.DueProbes(ctx, tx, 10)
				return err
			})
		}},
		{"paysched_reconciler", "move (webhook/resolver)", func(db *pgxpool.Pool) error {
			// The claim the sweeper released is PENDING; a gateway webhook
			// completes it.
			_, err := store.Apply(ctx, db, store.OutOfBandMove{ID: claimed[1].ID, By: payment.Webhook, To: payment.Completed,
				Amount: 100, Currency: "USD", GatewayRef: "ch_2", Actor: "gateway-webhook", Action: "WEBHOOK"})
			return err
		}},
		{"paysched_admin", "operator cancel, reconciliation run", func(db *pgxpool.Pool) error {
			// A PENDING payment an operator cancels.
			pid := uuid.New()
			if _, err := store.NewStore(e.admin).Create(ctx, []store.NewPayment{{ID: pid, Payer: "alice", Payee: "bob", Amount: 100,
				Currency: "USD", DueAt: due, CreatedAt: time.Now(), IdempotencyKey: "op-cancel"}}); err != nil {
				return err
			}
			// Through a running request a second operator approved (0026).
			var req int64
			if err := e.admin.QueryRow(ctx, `INSERT INTO console_requests (action, ids, attempts, reason, requested_by, requested_name, needs_approval,
				state, decided_by, decided_name, decided_at, runner, heartbeat_at) VALUES ('CANCEL_PENDING', ARRAY[$1::uuid], ARRAY[0], 'test',
				'a', 'ada', true, 'RUNNING', 'b', 'bea', now(), 'r', now()) RETURNING id`, pid).Scan(&req); err != nil {
				return err
			}
			if _, err := store.Apply(ctx, db, store.OutOfBandMove{ID: pid, By: payment.Operator, To: payment.Cancelled,
				Actor: "admin:ops", Action: "CANCEL", Reason: "test", Request: req}); err != nil {
				return err
			}
			return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				var run int64
				if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_runs (day, triggered_by) VALUES (current_date, 'admin:ops') RETURNING id`).Scan(&run); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET state = 'SUCCEEDED', finished_at = now() WHERE id = $1`, run)
				return err
			})
		}},
		{"paysched_admin", "console: sessions, requests, decisions, progress", func(db *pgxpool.Pool) error {
			for _, q := range []string{
				`DELETE FROM console_sessions WHERE expires_at < now() - interval '1 day'`,
				`INSERT INTO console_sessions (id, operator, name, role, via, created_at, expires_at, checked_at, refresh)
				 VALUES ('s1', 'iss#sub', 'ada', 'admin', 'oidc', now(), now() + interval '8 hours', now(), '\x00')`,
				`SELECT id, operator, name, role, via, expires_at, checked_at, refresh FROM console_sessions WHERE id = 's1' AND revoked_at IS NULL`,
				`UPDATE console_sessions SET checked_at = now() WHERE id = 's1' AND checked_at < now() RETURNING refresh`,
				`UPDATE console_sessions SET role = 'viewer', name = 'ada', refresh = NULL WHERE id = 's1'`,
				`UPDATE console_sessions SET revoked_at = now(), revoked_by = 'x', refresh = NULL WHERE operator = 'iss#sub'`,
				`INSERT INTO console_requests (action, ids, filter, amount_total, amount_max, reason, requested_by, requested_name,
				 needs_approval, state, attempts, amounts)
				 VALUES ('CANCEL', ARRAY[gen_random_uuid(), gen_random_uuid()], 'f', 2, 1, 'r', 'iss#a', 'ada', true, 'AWAITING_APPROVAL',
				         ARRAY[1, 1], '{"EUR": 2}')`,
				`UPDATE console_requests SET state = 'APPROVED', decided_by = 'iss#b', decided_name = 'bea', decided_at = now()
				 WHERE state = 'AWAITING_APPROVAL' AND requested_by <> 'iss#b'`,
				`UPDATE console_requests SET state = 'RUNNING', runner = 'r', heartbeat_at = now() WHERE state = 'APPROVED'`,
				`UPDATE console_requests SET done = 1, failed = 0, skipped = 1, errors = '{}', heartbeat_at = now(), state = 'DONE',
				 finished_at = now() WHERE runner = 'r'`,
			} {
				if _, err := db.Exec(ctx, q); err != nil {
					return fmt.Errorf("%s: %w", strings.Join(strings.Fields(q)[:3], " "), err)
				}
			}
			return nil
		}},
		{"paysched_audit", "append and overdue check", func(db *pgxpool.Pool) error {
			if _, err := db.Exec(ctx, `INSERT INTO audit_events (lsn, table_name, row_key, op, payment_id, status, event, committed_at)
				VALUES (1, 'payments', 'k', 'c', $1, 'PENDING', '{}', now()) ON CONFLICT (lsn, table_name, row_key) DO NOTHING`, ids[0]); err != nil {
				return err
			}
			if _, err := db.CopyFrom(ctx, pgx.Identifier{"audit_events"}, []string{"lsn", "table_name", "row_key", "op", "event", "committed_at"},
				pgx.CopyFromRows([][]any{{int64(2), "payments", "k", "u", "{}", time.Now()}})); err != nil {
				return err
			}
			_, err := store.Overdue(ctx, db, time.Second)
			return err
		}},
		{"paysched_cdc", "state, heartbeat, resync reads", func(db *pgxpool.Pool) error {
			for _, q := range []string{
				`INSERT INTO cdc_heartbeat (id, ts) VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET ts = now()`,
				`INSERT INTO cdc_state (slot, confirmed_lsn, confirmed_at) VALUES ('s', '0/1', now())
				 ON CONFLICT (slot) DO UPDATE SET confirmed_lsn = excluded.confirmed_lsn, confirmed_at = excluded.confirmed_at`,
				`SELECT confirmed_lsn::text, confirmed_at FROM cdc_state`,
				`SELECT * FROM payments WHERE updated_at >= now() - interval '1 day'`,
				`SELECT * FROM payment_attempts`,
				`SELECT * FROM payment_actions`,
			} {
				if _, err := db.Exec(ctx, q); err != nil {
					return fmt.Errorf("%s: %w", strings.Fields(q)[0], err)
				}
			}
			return nil
		}},
	}
	for _, s := range steps {
		if !t.Run(s.role+"/"+s.name, func(t *testing.T) {
			if err := s.run(e.pools[s.role]); err != nil {
				t.Fatalf("%s as %s: %v", s.name, s.role, err)
			}
		}) {
			t.FailNow() // later steps build on earlier ones
		}
	}
}

func TestServicesAreRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := uuid.New()
	due := time.Now().UTC()
	if _, err := store.NewStore(e.admin).Create(ctx, []store.NewPayment{{ID: id, Payer: "alice", Payee: "bob", Amount: 100,
		Currency: "USD", DueAt: due, CreatedAt: time.Now(), IdempotencyKey: "seed"}}); err != nil {
		t.Fatalf("seed: %v", err)
	}
	part := pgx.Identifier{store.Partition(due)}.Sanitize()
	rewrite := []string{
		`UPDATE payments SET amount_minor = 1`,
		`UPDATE payments SET payee = 'mallory'`,
		`UPDATE payments SET currency = 'EUR'`,
		`UPDATE ` + part + ` SET payee = 'mallory'`,
		`UPDATE ` + part + ` SET amount_minor = 1`,
		`DELETE FROM payments`,
		// A payment's tenant is set at create and moved by nobody.
		`UPDATE payments SET tenant = 'mallory'`,
		`UPDATE ` + part + ` SET tenant = 'mallory'`,
	}
	// Every role: no rewriting the money, no switching the append-only
	// triggers off, no new tables, no owner-only functions.
	every := append(rewrite,
		`ALTER TABLE audit_events DISABLE TRIGGER audit_events_no_update_delete`,
		`ALTER TABLE audit_events DISABLE TRIGGER ALL`,
		`ALTER TABLE payment_actions DISABLE TRIGGER payment_actions_no_update_delete`,
		`DROP TABLE `+part,
		`CREATE TABLE evil (x int)`,
		`SELECT paysched_grant_partition('payments')`,
		`UPDATE audit_events SET status = 'X'`,
		`DELETE FROM audit_events`,
		`TRUNCATE audit_events`,
		`DELETE FROM payment_attempts`,
	)
	only := map[string][]string{
		"paysched_api": {
			`INSERT INTO tenant_limits (tenant, weight, updated_by) VALUES ('greedy', 1000, 'api')`,
			`SELECT * FROM tenant_limits`,
			`SELECT * FROM audit_events`,
			`INSERT INTO audit_events (lsn, table_name, row_key, op, event, committed_at) VALUES (9, 't', 'k', 'c', '{}', now())`,
			`INSERT INTO payment_attempts (payment_id, attempt, gateway_key) VALUES ('` + id.String() + `', 1, 'k')`,
			`UPDATE payment_attempts SET outcome = 'SUCCEEDED'`,
			`SELECT gateway_key FROM payment_attempts`,
			`SELECT * FROM cdc_state`,
			`SELECT paysched_drop_partitions_before(current_date - 100)`,
			`INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status) VALUES ('` + id.String() + `', 'admin:x', 'x', 'DEAD_LETTERED', 'PENDING')`,
			`SELECT * FROM reconciliation_runs`,
			`UPDATE payments SET probe_first = false`,
			`UPDATE payments SET gateway_ref = 'x'`,
		},
		"paysched_admin": {
			`INSERT INTO payment_attempts (payment_id, attempt, gateway_key) VALUES ('` + id.String() + `', 1, 'k')`,
			`UPDATE payments SET attempt = 99`,
			`SELECT paysched_ensure_partitions(current_date, current_date)`,
		},
		"paysched_sweeper": {
			`INSERT INTO tenant_limits (tenant, weight, updated_by) VALUES ('greedy', 1000, 'sweeper')`,
			`UPDATE tenant_limits SET weight = 1000`,
			`INSERT INTO payment_attempts (payment_id, attempt, gateway_key) VALUES ('` + id.String() + `', 1, 'k')`,
			`UPDATE ` + part + ` SET run_at = now()`,
			`SELECT * FROM audit_events`,
			`SELECT * FROM payment_index`,
		},
		"paysched_executor": {
			`UPDATE ` + part + ` SET payer = 'mallory'`,
			`INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at) VALUES (gen_random_uuid(), 'a', 'b', 1, 'USD', now(), now())`,
			`INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status) VALUES ('` + id.String() + `', 'x', 'x', 'x', 'x')`,
			`SELECT * FROM audit_events`,
		},
		"paysched_reaper": {
			`SELECT * FROM audit_events`,
			`SELECT response FROM payment_index`,
			`UPDATE payments SET gateway_ref = 'x'`,
		},
		"paysched_reconciler": {
			`SELECT * FROM audit_events`,
			`INSERT INTO payment_attempts (payment_id, attempt, gateway_key) VALUES ('` + id.String() + `', 1, 'k')`,
			`UPDATE payments SET attempt = 99`,
		},
		"paysched_audit": {
			`SELECT * FROM audit_events`,
			`SELECT payee FROM payments`,
			`UPDATE payments SET status = 'CANCELLED'`,
			`SELECT * FROM payment_attempts`,
			`INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status) VALUES ('` + id.String() + `', 'x', 'x', 'x', 'x')`,
		},
		"paysched_cdc": {
			`UPDATE payments SET status = 'CANCELLED'`,
			`INSERT INTO audit_events (lsn, table_name, row_key, op, event, committed_at) VALUES (9, 't', 'k', 'c', '{}', now())`,
			`SELECT * FROM audit_events`,
			`ALTER PUBLICATION paysched DROP TABLE payments`,
		},
	}
	for _, r := range roles {
		for _, q := range append(append([]string{}, every...), only[r]...) {
			t.Run(r+"/"+q, func(t *testing.T) {
				tx, err := e.pools[r].Begin(ctx)
				if err != nil {
					t.Fatalf("begin: %v", err)
				}
				defer tx.Rollback(ctx) //nolint:errcheck // nothing must have changed
				_, err = tx.Exec(ctx, q)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "42501" {
					t.Fatalf("%s as %s: got %v, want SQLSTATE 42501", q, r, err)
				}
				// The append-only trigger raises 42501 too: the refusal must
				// be the privilege check's.
				if !strings.HasPrefix(pe.Message, "permission denied") && !strings.HasPrefix(pe.Message, "must be owner") {
					t.Fatalf("%s as %s: refused by %q, want a privilege check", q, r, pe.Message)
				}
			})
		}
	}
}

// TestOnlyCDCReplicates: only cdc's login user may open a replication
// connection; the group roles cannot pass the attribute on.
func TestOnlyCDCReplicates(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, r := range roles {
		t.Run(r, func(t *testing.T) {
			cfg, err := pgconn.ParseConfig(e.url + "&replication=database")
			if err != nil {
				t.Fatalf("parse url: %v", err)
			}
			cfg.User = e.users[r]
			conn, err := pgconn.ConnectConfig(ctx, cfg)
			if r == "paysched_cdc" {
				if err != nil {
					t.Fatalf("cdc replication connection: %v", err)
				}
				defer conn.Close(ctx)
				if _, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll(); err != nil {
					t.Fatalf("IDENTIFY_SYSTEM: %v", err)
				}
				return
			}
			if err == nil {
				conn.Close(ctx)
				t.Fatalf("%s opened a replication connection", r)
			}
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "42501" {
				t.Fatalf("%s: got %v, want SQLSTATE 42501", r, err)
			}
		})
	}
	var attr bool
	if err := e.admin.QueryRow(ctx, `SELECT bool_or(rolreplication) FROM pg_roles WHERE rolname = ANY($1)`, roles).Scan(&attr); err != nil || attr {
		t.Fatalf("a group role has REPLICATION (%v, %v)", attr, err)
	}
}

// TestCompromisedPod: each service's credentials, used by an attacker
// holding that pod, cannot move money outside the service's rights: the
// database refuses (42501, the privilege check or the state machine's
// guard) marking a payment COMPLETED, reverting a COMPLETED one, clearing
// probe_first (in every status, and in two steps through a dead letter),
// moving a payment back to PENDING without it, creating a payment that was
// never PENDING, forging another actor's payment_actions row; and the
// partition functions refuse ranges beyond their bounds (22023).
func TestCompromisedPod(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	seed := func(status string, probeFirst bool) uuid.UUID {
		t.Helper()
		id, _ := e.create(t)
		if _, err := e.admin.Exec(ctx, `UPDATE payments SET status = $2, probe_first = $3, attempt = 1 WHERE id = $1`, id, status, probeFirst); err != nil {
			t.Fatalf("seed: %v", err)
		}
		return id
	}
	pending, completed, dead := seed("PENDING", false), seed("COMPLETED", false), seed("DEAD_LETTERED", true)
	maybeCharged := seed("PENDING", true)
	processing := seed("PROCESSING", true)
	q := func(format string, id uuid.UUID) string { return fmt.Sprintf(format, id) }
	markCompleted := q(`UPDATE payments SET status = 'COMPLETED', gateway_ref = 'ch_forged' WHERE id = '%s'`, pending)
	revert := q(`UPDATE payments SET status = 'PENDING', probe_first = false WHERE id = '%s'`, completed)
	clearProbe := q(`UPDATE payments SET probe_first = false WHERE id = '%s'`, maybeCharged)
	forgeAdmin := q(`INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason)
		VALUES ('%s', 'admin:mallory', 'REDRIVE', 'DEAD_LETTERED', 'PENDING', 'forged')`, dead)
	forgeWebhook := q(`INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason)
		VALUES ('%s', 'gateway-webhook', 'WEBHOOK', 'DEAD_LETTERED', 'COMPLETED', 'forged')`, dead)
	createDone := `INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status)
		VALUES (gen_random_uuid(), 'mallory', 'mallory', 1, 'USD', now(), now(), 'COMPLETED')`
	executorJump := q(`UPDATE payments SET status = 'COMPLETED' WHERE id = '%s'`, pending)
	sweeperComplete := q(`UPDATE payments SET status = 'COMPLETED' WHERE id = '%s'`, processing)
	for _, c := range []struct {
		role  string
		stmts []string
	}{
		{"paysched_api", []string{markCompleted, revert, clearProbe, forgeAdmin, forgeWebhook, createDone,
			q(`UPDATE payments SET status = 'CANCELLED' WHERE id = '%s'`, completed)}},
		{"paysched_admin", []string{revert, forgeWebhook, createDone,
			q(`UPDATE payments SET status = 'FAILED' WHERE id = '%s'`, pending)}},
		{"paysched_sweeper", []string{markCompleted, revert, sweeperComplete, forgeAdmin}},
		{"paysched_executor", []string{executorJump, revert, forgeAdmin, createDone,
			q(`UPDATE payments SET status = 'CANCELLED' WHERE id = '%s'`, pending)}},
		{"paysched_reaper", []string{markCompleted, revert, clearProbe, sweeperComplete, forgeAdmin,
			`SELECT paysched_drop_partitions_before(current_date)`,
			`SELECT paysched_drop_partitions_before(current_date - 29)`,
			`SELECT paysched_drop_partitions_before('9999-12-31')`,
			`SELECT paysched_ensure_partitions(current_date, current_date + 5000)`,
			`SELECT paysched_ensure_partitions(current_date - 400, current_date)`}},
		{"paysched_reconciler", []string{revert, clearProbe, forgeAdmin,
			q(`UPDATE payments SET status = 'CANCELLED' WHERE id = '%s'`, pending)}},
		{"paysched_audit", []string{markCompleted, revert, clearProbe, forgeAdmin}},
		{"paysched_cdc", []string{markCompleted, revert, clearProbe, forgeAdmin}},
	} {
		for _, stmt := range c.stmts {
			t.Run(c.role+"/"+strings.Join(strings.Fields(stmt), " "), func(t *testing.T) {
				tx, err := e.pools[c.role].Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				_, err = tx.Exec(ctx, stmt)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || (pe.Code != "42501" && pe.Code != "22023") {
					t.Fatalf("as %s: got %v, want a refusal (42501 or 22023)", c.role, err)
				}
			})
		}
	}
	// probe_first, in every status and in two steps, for every role.
	t.Run("probe_first", func(t *testing.T) { probeFirstIsClearedOnlyByTheExecutorsMove(t, e) })
	// Nothing moved.
	var n int
	if err := e.admin.QueryRow(ctx, `SELECT count(*) FROM payments WHERE (id = $1 AND status = 'PENDING') OR (id = $2 AND status = 'COMPLETED')
		OR (id = $3 AND probe_first)`, pending, completed, maybeCharged).Scan(&n); err != nil || n != 3 {
		t.Fatalf("the payments moved: %d of 3 unchanged (%v)", n, err)
	}
}

// refused runs stmt as role in a transaction it rolls back and fails t
// unless the database refuses it with 42501 (a privilege check or a
// guard).
func (e *env) refused(t *testing.T, role, stmt string) {
	t.Helper()
	ctx := context.Background()
	tx, err := e.pools[role].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing must have changed
	_, err = tx.Exec(ctx, stmt)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("%s as %s: got %v, want a refusal (42501)", stmt, role, err)
	}
}

// seedAs makes a payment through the owner, then puts it in status with
// probe_first as given, at attempt 1 (a lease when PROCESSING, a reason
// when DEAD_LETTERED).
func (e *env) seedAs(t *testing.T, status payment.Status, probeFirst bool) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	id, _ := e.create(t)
	if _, err := e.admin.Exec(ctx, `UPDATE payments SET status = $2, probe_first = $3, attempt = 1,
		lease_until = CASE WHEN $2 = 'PROCESSING' THEN now() + interval '1 minute' END,
		lease_owner = CASE WHEN $2 = 'PROCESSING' THEN 'sweeper-1' END,
		dead_letter_reason = CASE WHEN $2 = 'DEAD_LETTERED' THEN 'AMBIGUOUS_UNRESOLVED' END WHERE id = $1`,
		id, string(status), probeFirst); err != nil {
		t.Fatalf("seed: %v", err)
	}
	return id
}

// probeFirstIsClearedOnlyByTheExecutorsMove (in TestCompromisedPod):
// probe_first says an
// earlier attempt may have charged the payment. It goes from true to false
// only in the executor's move out of PROCESSING (after the gateway proved
// no charge), whatever the status: no role clears it on its own, not even
// the executor. The two-step attack (clear it on a dead letter, then move
// the dead letter back to PENDING, whose next claim charges without asking)
// fails at the first step for every role, and the second step alone (a
// move to PENDING without probe_first) is refused too.
func probeFirstIsClearedOnlyByTheExecutorsMove(t *testing.T, e *env) {
	ctx := context.Background()
	maybe := map[payment.Status]uuid.UUID{}
	for _, s := range payment.Statuses {
		maybe[s] = e.seedAs(t, s, true)
	}
	for _, r := range roles {
		for _, s := range payment.Statuses {
			t.Run(r+"/clear in "+string(s), func(t *testing.T) {
				e.refused(t, r, fmt.Sprintf(`UPDATE payments SET probe_first = false WHERE id = '%s'`, maybe[s]))
			})
		}
		t.Run(r+"/two steps", func(t *testing.T) {
			tx, err := e.pools[r].Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			dead := maybe[payment.DeadLettered]
			for _, step := range []string{
				`UPDATE payments SET probe_first = false WHERE id = $1`,
				`UPDATE payments SET status = 'PENDING', run_at = now() WHERE id = $1`,
				`UPDATE payments SET status = 'PENDING' WHERE id = $1`,
			} {
				// Each step on its own: a refused one leaves the others to try.
				if _, err := tx.Exec(ctx, `SAVEPOINT step`); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, step, dead); err != nil {
					if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT step`); err != nil {
						t.Fatal(err)
					}
				}
			}
			var st string
			var pf bool
			if err := tx.QueryRow(ctx, `SELECT status, probe_first FROM payments WHERE id = $1`, dead).Scan(&st, &pf); err != nil {
				if errors.As(err, new(*pgconn.PgError)) {
					return // the role cannot even read it
				}
				t.Fatal(err)
			}
			if !pf {
				t.Fatalf("as %s the dead letter is %s without probe_first: its next claim charges without asking", r, st)
			}
		})
	}
	// A move to PENDING by anyone but the executor sets probe_first: a
	// dead letter that may never have been charged goes back asking, and
	// a claim taken back by the sweeper or the reaper may have reached the
	// gateway.
	fresh := map[payment.Status]uuid.UUID{payment.Processing: e.seedAs(t, payment.Processing, false),
		payment.DeadLettered: e.seedAs(t, payment.DeadLettered, false), payment.Held: e.seedAs(t, payment.Held, false),
		payment.Pending: e.seedAs(t, payment.Pending, false)}
	for _, c := range []struct {
		role string
		stmt string
	}{
		{"paysched_sweeper", fmt.Sprintf(`UPDATE payments SET status = 'PENDING', lease_until = NULL, lease_owner = NULL WHERE id = '%s'`, fresh[payment.Processing])},
		{"paysched_reaper", fmt.Sprintf(`UPDATE payments SET status = 'PENDING', lease_until = NULL, lease_owner = NULL WHERE id = '%s'`, fresh[payment.Processing])},
		{"paysched_admin", fmt.Sprintf(`UPDATE payments SET status = 'PENDING', run_at = now() WHERE id = '%s'`, fresh[payment.DeadLettered])},
		{"paysched_reconciler", fmt.Sprintf(`UPDATE payments SET status = 'PENDING', run_at = now() WHERE id = '%s'`, fresh[payment.DeadLettered])},
		// A payer's cancel of a payment an attempt may have charged.
		{"paysched_api", fmt.Sprintf(`UPDATE payments SET status = 'CANCELLED' WHERE id = '%s'`, maybe[payment.Pending])},
		// A held payment: only an operator moves it (or gateway truth);
		// no sweeper claims it, no payer cancels or holds, no executor
		// releases.
		{"paysched_sweeper", fmt.Sprintf(`UPDATE payments SET status = 'PROCESSING', attempt = attempt + 1 WHERE id = '%s'`, fresh[payment.Held])},
		{"paysched_api", fmt.Sprintf(`UPDATE payments SET status = 'CANCELLED' WHERE id = '%s'`, fresh[payment.Held])},
		{"paysched_api", fmt.Sprintf(`UPDATE payments SET status = 'HELD' WHERE id = '%s'`, fresh[payment.Pending])},
		{"paysched_executor", fmt.Sprintf(`UPDATE payments SET status = 'PENDING' WHERE id = '%s'`, fresh[payment.Held])},
		{"paysched_reaper", fmt.Sprintf(`UPDATE payments SET status = 'PENDING' WHERE id = '%s'`, fresh[payment.Held])},
	} {
		t.Run(c.role+"/"+c.stmt, func(t *testing.T) { e.refused(t, c.role, c.stmt) })
	}
	// What stays allowed: the executor's move out of PROCESSING clears it
	// (a proven absence, then a retry); the sweeper's release and the
	// reaper's expiry set it; an operator's cancel of a PENDING payment that
	// may be charged (admin-api asks the gateway first) is the operator's.
	for _, c := range []struct {
		role string
		stmt string
	}{
		{"paysched_executor", fmt.Sprintf(`UPDATE payments SET status = 'PENDING', probe_first = false, lease_until = NULL, lease_owner = NULL WHERE id = '%s'`, maybe[payment.Processing])},
		{"paysched_sweeper", fmt.Sprintf(`UPDATE payments SET status = 'PENDING', probe_first = true, lease_until = NULL, lease_owner = NULL WHERE id = '%s'`, fresh[payment.Processing])},
		{"paysched_reaper", fmt.Sprintf(`UPDATE payments SET status = 'PENDING', probe_first = true, lease_until = NULL, lease_owner = NULL WHERE id = '%s'`, fresh[payment.Processing])},
	} {
		t.Run("allowed/"+c.role+"/"+c.stmt, func(t *testing.T) {
			tx, err := e.pools[c.role].Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			if tag, err := tx.Exec(ctx, c.stmt); err != nil || tag.RowsAffected() != 1 {
				t.Fatalf("as %s: %v (%d rows)", c.role, err, tag.RowsAffected())
			}
		})
	}
}

// TestCreateIsAFreshPayment: the API's insert makes a payment nothing has
// touched: PENDING at attempt 0, due when it runs (run_at = due_time), no
// lease, no budget spent, no gateway state, and a tenant that is a name
// (not empty, at most 256 bytes, as a token's claim is).
func TestCreateIsAFreshPayment(t *testing.T) {
	e := newEnv(t)
	const ins = `INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant%s)
		VALUES (gen_random_uuid(), 'alice', 'bob', 100, 'USD', date_trunc('second', now()) + interval '1 hour', %s, %s%s)`
	due := `date_trunc('second', now()) + interval '1 hour'`
	for _, c := range []struct{ name, cols, runAt, tenant, vals string }{
		{"run_at after due", "", due + ` + interval '1 year'`, `'alice'`, ""},
		{"leased", ", lease_until, lease_owner", due, `'alice'`, ", now() + interval '1 hour', 'mallory'"},
		{"lease owner", ", lease_owner", due, `'alice'`, ", 'mallory'"},
		{"empty tenant", "", due, `''`, ""},
		{"long tenant", "", due, `repeat('t', 257)`, ""},
		{"releases", ", releases", due, `'alice'`, ", 3"},
		{"probes", ", probes", due, `'alice'`, ", 3"},
		{"dead letter reason", ", dead_letter_reason", due, `'alice'`, ", 'KEY_CONFLICT'"},
		{"failure reason", ", failure_reason", due, `'alice'`, ", 'DECLINED'"},
		{"last error", ", last_error", due, `'alice'`, ", 'x'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.refused(t, "paysched_api", fmt.Sprintf(ins, c.cols, c.runAt, c.tenant, c.vals))
		})
	}
	t.Run("fresh", func(t *testing.T) {
		if _, err := e.pools["paysched_api"].Exec(context.Background(), fmt.Sprintf(ins, "", due, `repeat('t', 256)`, "")); err != nil {
			t.Fatalf("a fresh payment: %v", err)
		}
	})
}

// TestNewPartitionsGrantTheEngine: a partition made after every migration
// (the reaper's and the API's upkeep make one a day) gives the sweeper and
// the executor each column their statements write, as the partitions the
// migrations made do: a later migration that redefines the grants must
// carry every column an earlier one added.
func TestNewPartitionsGrantTheEngine(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// One instant for the ensure and the names: a midnight passing in
	// between would name a day not made.
	now := time.Now()
	if _, err := store.EnsurePartitions(ctx, e.pools["paysched_reaper"], now, now.AddDate(0, 0, 400)); err != nil {
		t.Fatal(err)
	}
	newest := store.Partition(now.AddDate(0, 0, 400))
	oldest := store.Partition(now)
	for role, cols := range map[string][]string{
		"paysched_sweeper": {"status", "lease_until", "lease_owner", "attempt", "probe_first", "updated_at"},
		"paysched_executor": {"status", "run_at", "retries", "probe_first", "gateway_ref", "last_error", "dead_letter_reason",
			"lease_until", "lease_owner", "updated_at", "releases", "failure_reason",
			"attempt_outcome", "attempt_started_at", "attempt_error", "attempt_ref", "attempt_executor"},
	} {
		for _, part := range []string{oldest, newest} {
			for _, col := range cols {
				var ok bool
				if err := e.admin.QueryRow(ctx, `SELECT has_column_privilege($1, $2, $3, 'UPDATE')`, role, part, col).Scan(&ok); err != nil {
					t.Fatal(err)
				}
				if !ok {
					t.Errorf("%s may not update %s.%s", role, part, col)
				}
			}
		}
	}
}

// requests_sent_by is the guard's (schema 17): no role writes it, an
// insert's is cleared, and a move out of PROCESSING sets it to the earlier
// of the move and the lease's end, except the executor's move that starts
// no attempt (it sent nothing), which keeps it. A proven absence counts
// only once it is older than the gateway's longest request, so a role
// that could set it back could make a fresh absence count.
func TestRequestsSentByIsTheGuards(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// seed makes a payment PROCESSING at attempt 1 under a lease ending at
	// now + lease, its requests sent by t0.
	seed := func(lease string) store.ClaimRef {
		t.Helper()
		id, due := e.create(t)
		if _, err := e.admin.Exec(ctx, `UPDATE payments SET status = 'PROCESSING', attempt = 1, lease_owner = 'x',
			lease_until = now() + $2::interval WHERE id = $1`, id, lease); err != nil {
			t.Fatalf("seed: %v", err)
		}
		if _, err := e.admin.Exec(ctx, `UPDATE payments SET requests_sent_by = $2 WHERE id = $1`, id, t0); err != nil {
			t.Fatalf("seed: %v", err)
		}
		return store.ClaimRef{ID: id, DueTime: due, Attempt: 1}
	}
	sentBy := func(it store.ClaimRef) *time.Time {
		t.Helper()
		var at *time.Time
		if err := e.admin.QueryRow(ctx, `SELECT requests_sent_by FROM payments WHERE id = $1`, it.ID).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	it := seed("1 minute")
	for _, role := range roles {
		t.Run(role+" may not write it", func(t *testing.T) {
			_, err := e.pools[role].Exec(ctx, `UPDATE payments SET requests_sent_by = '2000-01-01' WHERE id = $1`, it.ID)
			if !refused(err) {
				t.Fatalf("%s set requests_sent_by: %v, want 42501", role, err)
			}
		})
	}
	t.Run("an insert's is cleared", func(t *testing.T) {
		id := uuid.New()
		if _, err := e.pools["paysched_api"].Exec(ctx, `INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status, tenant, requests_sent_by)
			VALUES ($1, 'mallory', 'mallory', 1, 'USD', now(), now(), 'PENDING', 'mallory', '2000-01-01')`, id); err != nil {
			t.Fatal(err)
		}
		if at := sentBy(store.ClaimRef{ID: id}); at != nil {
			t.Fatalf("requests_sent_by %v, want NULL", at)
		}
	})
	t.Run("the executor's release that sent nothing keeps it", func(t *testing.T) {
		if _, err := store.Complete(ctx, e.pools["paysched_executor"], "executor-0", []store.Transition{{ClaimRef: it,
			Status: payment.Pending, ProbeFirst: true, RunAt: time.Now().Add(time.Minute)}}); err != nil {
			t.Fatal(err)
		}
		if at := sentBy(it); at == nil || !at.Equal(t0) {
			t.Fatalf("requests_sent_by %v, want %s", at, t0)
		}
	})
	t.Run("an attempt the executor records sets it to now", func(t *testing.T) {
		it := seed("1 minute")
		before := time.Now()
		if _, err := store.Complete(ctx, e.pools["paysched_executor"], "executor-0", []store.Transition{{ClaimRef: it,
			Outcome: payment.Ambiguous, StartedAt: before, Status: payment.Pending, ProbeFirst: true, NewRetries: 1}}); err != nil {
			t.Fatal(err)
		}
		if at := sentBy(it); at == nil || at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
			t.Fatalf("requests_sent_by %v, want about %s", at, before)
		}
	})
	t.Run("the reaper's expiry sets it to the lease's end", func(t *testing.T) {
		it := seed("-1 second")
		var leaseEnd time.Time
		if err := e.admin.QueryRow(ctx, `SELECT lease_until FROM payments WHERE id = $1`, it.ID).Scan(&leaseEnd); err != nil {
			t.Fatal(err)
		}
		if _, err := store.ExpireLeases(ctx, e.pools["paysched_reaper"], 100); err != nil {
			t.Fatal(err)
		}
		if at := sentBy(it); at == nil || !at.Equal(leaseEnd) {
			t.Fatalf("requests_sent_by %v, want the lease's end %s", at, leaseEnd)
		}
	})
}

// refused reports whether err is the database's refusal (SQLSTATE 42501).
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// create makes a PENDING payment of alice's, due a minute ago, as the
// superuser, returning its id and due time.
func (e *env) create(t *testing.T) (uuid.UUID, time.Time) {
	t.Helper()
	id, due := uuid.New(), time.Now().Add(-time.Minute).UTC()
	if _, err := store.NewStore(e.admin).Create(context.Background(), []store.NewPayment{{ID: id, Payer: "alice", Payee: "bob", Amount: 100,
		Currency: "USD", DueAt: due, CreatedAt: time.Now(), IdempotencyKey: id.String()}}); err != nil {
		t.Fatalf("seed: %v", err)
	}
	return id, due
}
