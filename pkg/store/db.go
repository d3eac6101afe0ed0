// Package store is the one home of the SQL that reads or moves a payment:
// creating, reading, listing and cancelling payments, claiming and
// releasing them, recording attempts and outcomes, taking back expired
// leases, and the fenced moves of the reconciler, webhooks, the resolver
// and operators. No other package writes payments, payment_attempts or
// payment_actions. Each statement that moves money says why it is safe
// beside it; the transitions each makes are pkg/payment's Moves.
package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the store's statements run on: a pgx pool, connection or
// transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}
