// Command migrate applies paysched's embedded schema migrations: the local
// stack, the tests and the Kubernetes Job all run this one step.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
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
	create := fs.Bool("create-database", true, "create the database first if it does not exist")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(2)
	}
	log := obs.Logger("migrate")
	mode.Announce(log)
	if err := mode.DatabaseURL("--database-url", *dbURL); err != nil {
		log.Error("migration refused", "err", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, *dbURL, *create, log.Info); err != nil {
		log.Error("migration failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, create bool, info func(string, ...any)) error {
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
	applied, err := schema.Up(ctx, conn)
	if err != nil {
		return err
	}
	info("schema up to date", "applied", applied)
	return nil
}
