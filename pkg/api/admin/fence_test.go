package admin_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// claimingProber answers "proven absent", but while it is asked a sweeper
// claims the payment and its attempt ends retryable (back to PENDING at
// attempt 1): a charge may have landed since the operator read the row.
type claimingProber struct {
	db *pgxpool.Pool
	id uuid.UUID
	t  *testing.T
}

func (c claimingProber) Probe(ctx context.Context, _ gateway.ChargeInput) gateway.Result {
	if _, err := c.db.Exec(ctx, `UPDATE payments SET attempt = attempt + 1, probe_first = true WHERE id = $1`, c.id); err != nil {
		c.t.Error(err)
	}
	return gateway.Result{Absent: true}
}

func (c claimingProber) Cancel(context.Context, gateway.ChargeInput, string) gateway.Result {
	return gateway.Result{}
}

// TestOperatorCancelOfANeverClaimedPaymentIsFenced: an operator cancels a
// payment read at attempt 0 (never claimed); a claim lands while the
// gateway is asked. The move must miss (ABORTED, MOVED_MEANWHILE), never
// cancel a payment whose charge the gateway was not asked about.
func TestOperatorCancelOfANeverClaimedPaymentIsFenced(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	id := uuid.New()
	if _, err := store.NewStore(db).Create(ctx, []store.NewPayment{{ID: id, Payer: "alice", Payee: "bob", Amount: 100, Currency: "USD",
		DueAt: time.Now().Add(time.Minute), CreatedAt: time.Now(), IdempotencyKey: "k"}}); err != nil {
		t.Fatal(err)
	}
	srv := admin.New(db, nil, claimingProber{db: db, id: id, t: t}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	relax(srv, db)
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	_, err := srv.CancelPayment(actx, &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: "customer asked"})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("cancel while a claim landed: %v, want ABORTED (MOVED_MEANWHILE)", err)
	}
	var st string
	if err := db.QueryRow(ctx, `SELECT status FROM payments WHERE id = $1`, id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	if st != "PENDING" {
		t.Fatalf("the payment is %s, want PENDING (untouched)", st)
	}
}
