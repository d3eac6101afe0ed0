package svc

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/platform/obs"
)

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

// WorkerService is the end of a worker service's main: a worker on one
// database pool, serving /metrics and /healthz (ready while the database
// answers) on HTTPAddr.
type WorkerService struct {
	Name string
	Log  *slog.Logger
	// DatabaseURL, MaxConns and PoolOptions make the pool (Pool).
	DatabaseURL string
	MaxConns    int
	PoolOptions []PoolOption
	HTTPAddr    string
}

// Run connects the pool, makes the worker with newWorker and runs it until
// ctx ends. A worker with a Close method is closed before the pool.
func (w WorkerService) Run(ctx context.Context, newWorker func(Deps) (Worker, error)) error {
	pool, err := Pool(ctx, w.DatabaseURL, w.MaxConns, w.PoolOptions...)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := obs.Registry()
	wk, err := newWorker(Deps{Pool: pool, Registry: reg})
	if err != nil {
		return err
	}
	if cl, ok := wk.(interface{ Close() }); ok {
		defer cl.Close()
	}
	return Server{Name: w.Name, Log: w.Log, Registry: reg, HTTPAddr: w.HTTPAddr, Ready: pool.Ping}.Run(ctx, wk.Run)
}
