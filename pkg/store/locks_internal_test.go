package store

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/test/pgtest"
)

// Reads and cancels by id must plan and lock the one partition holding the
// payment, not every day of the year: a subquery for the due time made each
// cancel lock ~2,000 relations, slow (tens of ms) and, a few at once,
// overflowing Postgres's lock table.
func TestByIDStatementsLockOnePartition(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	id, _ := uuid.NewV7()
	due := time.Now().Add(time.Hour).UTC()
	if _, err := NewStore(db).Create(ctx, []NewPayment{{ID: id, Payer: "alice", Payee: "bob", Amount: 1, Currency: "USD",
		DueAt: due, CreatedAt: time.Now(), IdempotencyKey: "k", RequestHash: []byte{1}, Response: []byte{1}}}); err != nil {
		t.Fatal(err)
	}
	var parts int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'payments'::regclass`).Scan(&parts); err != nil || parts < 300 {
		t.Fatalf("partitions: %d %v (the test needs the year of them)", parts, err)
	}
	for _, tc := range []struct {
		name string
		sql  string
		args []any
	}{
		{"get", getSQL, []any{id, "alice", due}},
		{"get any", getAnySQL, []any{id, due}},
		{"cancel", cancelSQL, []any{id, "alice", due}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, tc.sql, tc.args...)
				if err != nil {
					return err
				}
				rows.Close()
				var locked int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
					WHERE l.pid = pg_backend_pid() AND c.relname LIKE 'payments_%'`).Scan(&locked); err != nil {
					return err
				}
				if locked > 10 {
					t.Errorf("%s locked %d partition relations, want one partition and its indexes", tc.name, locked)
				}
				return rows.Err()
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
