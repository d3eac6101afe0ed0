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

	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

// hookProber answers "proven absent" and runs during each probe what the
// test says happens meanwhile.
type hookProber struct{ during func() }

func (h hookProber) Probe(context.Context, gateway.ChargeInput) gateway.Result {
	if h.during != nil {
		h.during()
	}
	return gateway.Result{Outcome: payment.Retryable, Absent: true}
}
func (hookProber) Cancel(context.Context, gateway.ChargeInput, string) gateway.Result {
	return gateway.Result{}
}

// TestConsoleActionsActOnlyOnThePinnedDeadLetter: the console's actions
// act on a dead letter only while it is dead-lettered at the attempt the
// request pinned. A change before the action (a re-drive, a new attempt)
// or while the gateway is asked is answered CHANGED_SINCE_REQUEST and
// moves nothing; the payment keeps what it became.
func TestConsoleActionsActOnlyOnThePinnedDeadLetter(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	seed := func() uuid.UUID {
		t.Helper()
		id := uuid.New()
		if _, err := store.NewStore(db).Create(ctx, []store.NewPayment{{ID: id, Payer: "alice", Payee: "bob", Amount: 100,
			Currency: "USD", DueAt: time.Now().Add(-time.Minute), CreatedAt: time.Now(), IdempotencyKey: id.String()}}); err != nil {
			t.Fatal(err)
		}
		exec(t, db, `UPDATE payments SET status = 'DEAD_LETTERED', attempt = 3, probe_first = true,
			dead_letter_reason = 'AMBIGUOUS_UNRESOLVED' WHERE id = $1`, id)
		return id
	}
	const redrive = `UPDATE payments SET status = 'PENDING', dead_letter_reason = NULL WHERE id = $1`
	const deadAgain = `UPDATE payments SET attempt = 4 WHERE id = $1`
	type act func(a admin.ConsoleActions, id uuid.UUID, attempt int32) error
	acts := map[string]act{
		"cancel": func(a admin.ConsoleActions, id uuid.UUID, at int32) error {
			return a.Cancel(ctx, "ada", id, at, "request #1")
		},
		"redrive": func(a admin.ConsoleActions, id uuid.UUID, at int32) error {
			return a.Redrive(ctx, "ada", id, at, "request #1")
		},
		"resolve": func(a admin.ConsoleActions, id uuid.UUID, at int32) error {
			return a.Resolve(ctx, "ada", id, at, "request #1")
		},
	}
	for name, do := range acts {
		for _, c := range []struct {
			name          string
			pin           int32
			before, while string
			moved         bool
			want          string // status after; "" when moved
		}{
			{name: "unchanged", pin: 3, moved: true},
			{name: "pinned before attempts were", pin: -1, moved: true},
			{name: "re-driven before", pin: 3, before: redrive, want: "PENDING"},
			{name: "dead again at a later attempt", pin: 3, before: deadAgain, want: "DEAD_LETTERED"},
			{name: "re-driven while the gateway is asked", pin: 3, while: redrive, want: "PENDING"},
			{name: "dead again while the gateway is asked", pin: 3, while: deadAgain, want: "DEAD_LETTERED"},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				id := seed()
				if c.before != "" {
					exec(t, db, c.before, id)
				}
				var during func()
				if c.while != "" {
					during = func() { exec(t, db, c.while, id) }
				}
				a := admin.NewConsoleActions(admin.New(db, nil, hookProber{during: during}, quiet))
				err := do(a, id, c.pin)
				var n int
				if qerr := db.QueryRow(ctx, `SELECT count(*) FROM payment_actions WHERE payment_id = $1`, id).Scan(&n); qerr != nil {
					t.Fatal(qerr)
				}
				if c.moved {
					if err != nil || n != 1 {
						t.Fatalf("%v, %d actions: want the move made", err, n)
					}
					return
				}
				if status.Code(err) != codes.FailedPrecondition || apierr.Reason(err) != apierr.ReasonChangedSinceRequest {
					t.Fatalf("got %v (%s), want FAILED_PRECONDITION %s", err, apierr.Reason(err), apierr.ReasonChangedSinceRequest)
				}
				var st string
				if qerr := db.QueryRow(ctx, `SELECT status FROM payments WHERE id = $1`, id).Scan(&st); qerr != nil {
					t.Fatal(qerr)
				}
				if st != c.want || n != 0 {
					t.Fatalf("the payment is %s with %d actions, want %s untouched", st, n, c.want)
				}
			})
		}
	}
}

func exec(t *testing.T, db *pgxpool.Pool, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), q, args...); err != nil {
		t.Error(err)
	}
}
