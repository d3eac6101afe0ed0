package store

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/store/paymentdb"
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
		run  func(q *paymentdb.Queries) error
	}{
		{"get", func(q *paymentdb.Queries) error {
			_, err := q.GetPayment(ctx, paymentdb.GetPaymentParams{ID: id, Payer: "alice", DueTime: due})
			return err
		}},
		{"get any", func(q *paymentdb.Queries) error {
			_, err := q.GetPayment(ctx, paymentdb.GetPaymentParams{ID: id, DueTime: due})
			return err
		}},
		{"cancel", func(q *paymentdb.Queries) error {
			_, err := q.CancelPayment(ctx, paymentdb.CancelPaymentParams{ID: id, Payer: "alice", DueTime: due})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if err := tc.run(paymentdb.New(tx)); err != nil {
					return err
				}
				var locked int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
					WHERE l.pid = pg_backend_pid() AND c.relname LIKE 'payments_%'`).Scan(&locked); err != nil {
					return err
				}
				if locked > 10 {
					t.Errorf("%s locked %d partition relations, want one partition and its indexes", tc.name, locked)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
