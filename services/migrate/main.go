// Command migrate applies paysched's embedded schema migrations: the local
// stack, the tests and the Kubernetes Job all run this one step. With
// --audit-database-url it also makes the audit log's database, and with
// --move-audit-rows it copies an older install's audit rows into it. The
// webhooks' tables go to --webhooks-database-url (made when set), or to
// the schedule's database; an older install's endpoints are copied there.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/store/schema"
)

func main() {
	fs := flag.NewFlagSet("migrate", flag.ExitOnError)
	mode := config.RegisterMode(fs)
	dbURL := fs.String("database-url", "postgres://postgres@127.0.0.1:55432/paysched?sslmode=disable", "Postgres URL")
	auditURL := fs.String("audit-database-url", "", "Postgres URL of the audit log's database (the audit-consumer's --audit-database-url): made and migrated too when set")
	webhooksURL := fs.String("webhooks-database-url", "", "Postgres URL of the webhooks' database (the webhook-dispatcher's, admin-api's and payments-api's --webhooks-database-url): made and migrated when set; empty: the webhook tables live in --database-url (development)")
	move := fs.Bool("move-audit-rows", false, "copy the audit_events rows of --database-url into --audit-database-url (an install from before the audit log had its own database); idempotent, resumable, safe while the audit-consumer runs")
	create := fs.Bool("create-database", true, "create the database first if it does not exist")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(2)
	}
	log := obs.Logger("migrate")
	mode.Announce(log)
	if err := check(mode, *dbURL, *auditURL, *webhooksURL, *move); err != nil {
		log.Error("migration refused", "err", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, *dbURL, *create, schema.Up, log.Info); err != nil {
		log.Error("migration failed", "err", err)
		os.Exit(1)
	}
	hooks := *webhooksURL
	if hooks == "" {
		hooks = *dbURL
	}
	if err := run(ctx, hooks, *create, schema.UpWebhooks, log.Info); err != nil {
		log.Error("webhooks migration failed", "err", err)
		os.Exit(1)
	}
	if n, err := copyEndpoints(ctx, *dbURL, hooks); err != nil {
		log.Error("copying the webhook endpoints of schema 23 failed (run it again: it resumes)", "err", err)
		os.Exit(1)
	} else if n > 0 {
		log.Info("webhook endpoints copied into the webhooks' database (the schedule's webhooks_v1 schema may be dropped once checked)", "endpoints", n)
	}
	if *auditURL == "" {
		return
	}
	if err := run(ctx, *auditURL, *create, schema.UpAudit, log.Info); err != nil {
		log.Error("audit log migration failed", "err", err)
		os.Exit(1)
	}
	if *move {
		// A large log takes a while: no deadline but the operator's ^C.
		mctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		n, err := moveRows(mctx, *dbURL, *auditURL)
		if err != nil {
			log.Error("moving the audit rows failed (run it again: it resumes)", "err", err, "moved", n)
			os.Exit(1)
		}
		log.Info("audit rows copied into the audit log's database", "rows", n)
	}
}

// check validates the flags before anything connects.
func check(mode *config.Mode, dbURL, auditURL, webhooksURL string, move bool) error {
	if err := mode.DatabaseURL("--database-url", dbURL); err != nil {
		return err
	}
	if webhooksURL != "" {
		if err := mode.DatabaseURL("--webhooks-database-url", webhooksURL); err != nil {
			return err
		}
	}
	if auditURL != "" {
		if err := mode.DatabaseURL("--audit-database-url", auditURL); err != nil {
			return err
		}
	}
	switch {
	case move && auditURL == "":
		return fmt.Errorf("--move-audit-rows needs --audit-database-url")
	case move && auditURL == dbURL:
		return fmt.Errorf("--move-audit-rows: --audit-database-url is --database-url: nothing to move")
	}
	return nil
}

// copyEndpoints copies schema 23's endpoints from the schedule's database
// into the webhooks' (schema.CopyWebhookEndpoints).
func copyEndpoints(ctx context.Context, fromURL, toURL string) (int64, error) {
	from, err := pgx.Connect(ctx, fromURL)
	if err != nil {
		return 0, fmt.Errorf("connect --database-url: %w", err)
	}
	defer from.Close(ctx)
	to := from
	if toURL != fromURL {
		if to, err = pgx.Connect(ctx, toURL); err != nil {
			return 0, fmt.Errorf("connect --webhooks-database-url: %w", err)
		}
		defer to.Close(ctx)
	}
	return schema.CopyWebhookEndpoints(ctx, from, to)
}

func moveRows(ctx context.Context, fromURL, toURL string) (int64, error) {
	from, err := pgx.Connect(ctx, fromURL)
	if err != nil {
		return 0, fmt.Errorf("connect --database-url: %w", err)
	}
	defer from.Close(ctx)
	to, err := pgx.Connect(ctx, toURL)
	if err != nil {
		return 0, fmt.Errorf("connect --audit-database-url: %w", err)
	}
	defer to.Close(ctx)
	return schema.MoveAuditRows(ctx, from, to, 10_000)
}

func run(ctx context.Context, url string, create bool, up func(context.Context, *pgx.Conn) ([]string, error), info func(string, ...any)) error {
	if create {
		if err := schema.CreateDatabase(ctx, url); err != nil {
			return err
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	applied, err := up(ctx, conn)
	if err != nil {
		return err
	}
	info("schema up to date", "applied", applied)
	return nil
}
