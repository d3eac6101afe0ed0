package svc

import (
	"cmp"
	"context"
	"flag"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/obs"
)

// MetricsUsage is --http-addr's usage where that listener serves only
// /metrics and /healthz (Flags.HTTPUsage's default).
const MetricsUsage = "metrics and health listen address"

// Flags names what every database-backed service's command line has: its
// database flag and --http-addr. The zero values are the common case.
type Flags struct {
	// Name is the service's (and its flag set's) name.
	Name string
	// DatabaseFlag is the database flag's name ("database-url" if empty),
	// DatabaseDefault its default (config.LocalDatabaseURL if empty) and
	// DatabaseUsage its usage ("Postgres URL" if empty).
	DatabaseFlag, DatabaseDefault, DatabaseUsage string
	// HTTPAddr is --http-addr's default, HTTPUsage its usage (MetricsUsage
	// if empty).
	HTTPAddr, HTTPUsage string
}

// Command is a database-backed service's command line: the flag set its
// main adds its own flags to, --dev and the database flag
// (config.Service), and --http-addr.
type Command struct {
	*flag.FlagSet
	*config.Service
	// HTTPAddr is --http-addr's value.
	HTTPAddr *string
}

// NewCommand makes a service's flag set and adds the flags that f names.
func NewCommand(f Flags) *Command {
	fs := flag.NewFlagSet(f.Name, flag.ExitOnError)
	base := config.RegisterService(fs, cmp.Or(f.DatabaseFlag, "database-url"), cmp.Or(f.DatabaseDefault, config.LocalDatabaseURL),
		cmp.Or(f.DatabaseUsage, "Postgres URL"))
	return &Command{FlagSet: fs, Service: base, HTTPAddr: fs.String("http-addr", f.HTTPAddr, cmp.Or(f.HTTPUsage, MetricsUsage))}
}

// Main runs the service as Main does, starting with config.Service.Start
// (the mode announced, the database URL checked) before run.
func (c *Command) Main(run func(ctx context.Context, log *slog.Logger) error) {
	Main(c.Name(), c.FlagSet, func(ctx context.Context, log *slog.Logger) error {
		if err := c.Start(log); err != nil {
			return err
		}
		return run(ctx, log)
	})
}

// Worker is a worker service's loop: the sweeper's, the reaper's, cdc's.
type Worker interface {
	Run(ctx context.Context) error
}

// Deps is what a worker is made of: the service's database pool and its
// metrics registry.
type Deps struct {
	Pool     *pgxpool.Pool
	Registry *prometheus.Registry
}

// RunWorker is the end of a worker service's main: it connects a pool of
// maxConns to the database flag's URL, makes the worker with newWorker and
// runs it, serving /metrics and /healthz (ready while the database answers)
// on --http-addr until ctx ends. A worker with a Close method is closed
// before the pool.
func (c *Command) RunWorker(ctx context.Context, log *slog.Logger, maxConns int, newWorker func(Deps) (Worker, error),
	opts ...PoolOption) error {
	pool, err := Pool(ctx, *c.DB, maxConns, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := obs.Registry()
	w, err := newWorker(Deps{Pool: pool, Registry: reg})
	if err != nil {
		return err
	}
	if cl, ok := w.(interface{ Close() }); ok {
		defer cl.Close()
	}
	return Server{Name: c.Name(), Log: log, Registry: reg, HTTPAddr: *c.HTTPAddr, Ready: pool.Ping}.Run(ctx, w.Run)
}
