// Package schema holds paysched's versioned SQL migrations, embedded in
// every binary, and applies them (Up) and creates the database
// (CreateDatabase). The runtime upkeep of partitions is pkg/store's.
package schema

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed sql/*.sql auditsql/*.sql webhooksql/*.sql
var files embed.FS

// The three schemas: the schedule's database (sql/), the audit log's
// (auditsql/) and the webhooks' (webhooksql/), each with its own record of
// what was applied, so that they may even share a database.
var (
	scheduleSet = set{dir: "sql", table: "schema_migrations", lock: 7_202_611_300}
	auditSet    = set{dir: "auditsql", table: "audit_schema_migrations", lock: 7_202_611_302}
	webhookSet  = set{dir: "webhooksql", table: "webhook_schema_migrations", lock: 7_202_611_304}
)

type set struct {
	dir, table string
	// lock serializes concurrent migrators (several pods, several test
	// packages) on one database.
	lock int64
}

// Migration is one versioned SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the schedule database's embedded migrations in version
// order.
func All() ([]Migration, error) { return scheduleSet.all() }

// AllAudit returns the audit log database's migrations in version order.
func AllAudit() ([]Migration, error) { return auditSet.all() }

// AllWebhooks returns the webhooks database's migrations in version order.
func AllWebhooks() ([]Migration, error) { return webhookSet.all() }

func (st set) all() ([]Migration, error) {
	entries, err := fs.ReadDir(files, st.dir)
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %q: name must start with a version number and '_'", name)
		}
		b, err := files.ReadFile(st.dir + "/" + name)
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}

// Up applies every schedule migration not yet recorded in
// schema_migrations, each in its own transaction, under an advisory lock.
// It returns the names applied.
func Up(ctx context.Context, conn *pgx.Conn) ([]string, error) { return scheduleSet.up(ctx, conn) }

// UpAudit does the same for the audit log's database
// (audit_schema_migrations).
func UpAudit(ctx context.Context, conn *pgx.Conn) ([]string, error) { return auditSet.up(ctx, conn) }

// UpWebhooks does the same for the webhooks' database
// (webhook_schema_migrations).
func UpWebhooks(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	return webhookSet.up(ctx, conn)
}

func (st set) up(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	migs, err := st.all()
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, st.lock); err != nil {
		return nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		// Released with the session anyway, if this fails.
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, st.lock)
	}()
	table := pgx.Identifier{st.table}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("migrate: create %s: %w", st.table, err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, `SELECT version FROM `+table)
	if err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", st.table, err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("migrate: scan version: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrate: read %s: %w", st.table, err)
	}
	var done []string
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO `+table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("migrate: apply %s: %w", m.Name, err)
		}
		done = append(done, m.Name)
	}
	return done, nil
}
