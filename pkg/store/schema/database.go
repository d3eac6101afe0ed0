package schema

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// CreateDatabase creates the database named in url if it does not exist,
// connecting to the server's "postgres" database to do so.
func CreateDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	name := cfg.Database
	if name == "" || name == "postgres" {
		return nil
	}
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to create database %s: %w", name, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// MoveAuditRows copies the schedule database's audit_events (from) into
// the audit log's database (to), in key order, a batch per statement, and
// returns how many rows it inserted. It is idempotent and resumable: rows
// already there are skipped (ON CONFLICT DO NOTHING), so it may run while
// an audit-consumer writes new changes into to, and run again after an
// interruption. The rows in from are left as they are (audit_events is
// append-only); drop that table as its owner once the copy is checked.
func MoveAuditRows(ctx context.Context, from, to *pgx.Conn, batch int) (int64, error) {
	if batch <= 0 {
		batch = 10_000
	}
	var exists bool
	if err := from.QueryRow(ctx, `SELECT to_regclass('audit_events') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look for audit_events: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var (
		moved    int64
		lsn      int64 = -1 << 63
		tbl, key string
	)
	for {
		rows, err := from.Query(ctx, `SELECT lsn, table_name, row_key, op, payment_id::text, status, event, committed_at, recorded_at
			FROM audit_events WHERE (lsn, table_name, row_key) > ($1, $2, $3)
			ORDER BY lsn, table_name, row_key LIMIT $4`, lsn, tbl, key, batch)
		if err != nil {
			return moved, fmt.Errorf("read audit_events: %w", err)
		}
		var (
			lsns                      []int64
			tables, keys, ops, events []string
			ids                       []*string
			statuses                  []*string
			committed, recorded       []time.Time
		)
		for rows.Next() {
			var (
				l       int64
				t, k, o string
				id      *string
				st      *string
				ev      string
				c, r    time.Time
			)
			if err := rows.Scan(&l, &t, &k, &o, &id, &st, &ev, &c, &r); err != nil {
				rows.Close()
				return moved, fmt.Errorf("read audit_events: %w", err)
			}
			lsns, tables, keys, ops, ids, statuses, events = append(lsns, l), append(tables, t), append(keys, k), append(ops, o),
				append(ids, id), append(statuses, st), append(events, ev)
			committed, recorded = append(committed, c), append(recorded, r)
		}
		if err := rows.Err(); err != nil {
			return moved, fmt.Errorf("read audit_events: %w", err)
		}
		if len(lsns) == 0 {
			return moved, nil
		}
		tag, err := to.Exec(ctx, `INSERT INTO audit_events (lsn, table_name, row_key, op, payment_id, status, event, committed_at, recorded_at)
			SELECT l, t, k, o, p::uuid, s, e, c, r
			FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::timestamptz[])
			    AS x(l, t, k, o, p, s, e, c, r)
			ON CONFLICT DO NOTHING`, lsns, tables, keys, ops, ids, statuses, events, committed, recorded)
		if err != nil {
			return moved, fmt.Errorf("write audit_events: %w", err)
		}
		moved += tag.RowsAffected()
		n := len(lsns) - 1
		lsn, tbl, key = lsns[n], tables[n], keys[n]
	}
}

// CopyWebhookEndpoints copies the endpoints that schema version 23 kept in
// the schedule's database (moved aside into webhooks_v1 by version 24)
// into the webhooks' database, and returns how many it inserted. Idempotent:
// an endpoint already there is left as it is. Deliveries are not copied:
// what was owed then stays in webhooks_v1 for the record.
func CopyWebhookEndpoints(ctx context.Context, from, to *pgx.Conn) (int64, error) {
	var exists bool
	if err := from.QueryRow(ctx, `SELECT to_regclass('webhooks_v1.webhook_endpoints') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look for webhooks_v1.webhook_endpoints: %w", err)
	}
	if !exists {
		return 0, nil
	}
	rows, err := from.Query(ctx, `SELECT id, tenant, url, event_types, description, enabled, secrets, rotate_until,
		max_inflight, greatest(max_per_second, 1), failing_since, disabled_reason, created_at
		FROM webhooks_v1.webhook_endpoints ORDER BY id`)
	if err != nil {
		return 0, fmt.Errorf("read webhooks_v1.webhook_endpoints: %w", err)
	}
	var all [][]any
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("read webhooks_v1.webhook_endpoints: %w", err)
		}
		all = append(all, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read webhooks_v1.webhook_endpoints: %w", err)
	}
	var n int64
	for _, v := range all {
		tag, err := to.Exec(ctx, `INSERT INTO webhook_endpoints (id, tenant, url, event_types, description, enabled, secrets,
			rotate_until, max_inflight, max_per_second, failing_since, disabled_reason, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) ON CONFLICT (id) DO NOTHING`, v...)
		if err != nil {
			return n, fmt.Errorf("copy endpoint %v: %w", v[0], err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}
