package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/reconcile/reconciledb"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

// moveLog records every status change of payments through a trigger, so the
// test sees what the statements did, not what their Go callers meant.
type moveLog struct {
	t  *testing.T
	db *pgxpool.Pool
}

func newMoveLog(t *testing.T, db *pgxpool.Pool) *moveLog {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE status_log (prev text, next text)`,
		`CREATE FUNCTION log_status() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		   IF OLD.status IS DISTINCT FROM NEW.status THEN
		     INSERT INTO status_log VALUES (OLD.status, NEW.status);
		   END IF;
		   RETURN NULL;
		 END $$`,
		`CREATE TRIGGER log_status AFTER UPDATE ON payments FOR EACH ROW EXECUTE FUNCTION log_status()`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return &moveLog{t: t, db: db}
}

// take returns and clears the changes logged so far.
func (l *moveLog) take() [][2]payment.Status {
	l.t.Helper()
	rows, err := l.db.Query(context.Background(), `DELETE FROM status_log RETURNING prev, next`)
	if err != nil {
		l.t.Fatal(err)
	}
	defer rows.Close()
	var out [][2]payment.Status
	for rows.Next() {
		var a, b string
		if err := rows.Scan(&a, &b); err != nil {
			l.t.Fatal(err)
		}
		out = append(out, [2]payment.Status{payment.Status(a), payment.Status(b)})
	}
	return out
}

// TestStoreMovesAreInTheTable runs every status-changing statement of
// pkg/store, as the actor that runs it in production, on a payment in every
// status, and checks each change the trigger saw against payment.Moves. It
// also checks that every row of the table is made by some statement, so the
// table holds no move the code cannot make.
func TestStoreMovesAreInTheTable(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	st := store.NewStore(db)
	log := newMoveLog(t, db)
	seen := map[payment.Move]bool{}
	keys := 0

	// seed makes a payment in status s at attempt 1, due a minute ago, with
	// an expired lease (PROCESSING) and a started attempt when started.
	seed := func(s payment.Status, started bool) (uuid.UUID, time.Time) {
		t.Helper()
		keys++
		p := newPayment(fmt.Sprint("move-", keys), time.Now().Add(-time.Minute).Truncate(time.Microsecond), 100)
		p.Payer = "mover"
		if _, err := st.Create(ctx, []store.NewPayment{p}); err != nil {
			t.Fatal(err)
		}
		var reason *string
		if s == payment.DeadLettered {
			r := string(payment.RetriesExhausted)
			reason = &r
		}
		if _, err := db.Exec(ctx, `UPDATE payments SET status = $2, attempt = 1, dead_letter_reason = $3,
			lease_until = CASE WHEN $2 = 'PROCESSING' THEN now() - interval '1 s' END,
			lease_owner = CASE WHEN $2 = 'PROCESSING' THEN 'sweeper-x' END WHERE id = $1`, p.ID, s, reason); err != nil {
			t.Fatal(err)
		}
		if started {
			if _, err := db.Exec(ctx, `INSERT INTO payment_attempts (payment_id, attempt, gateway_key) VALUES ($1, 1, $2)`, p.ID, p.ID.String()); err != nil {
				t.Fatal(err)
			}
		}
		log.take() // the seed's own UPDATE is not a move
		return p.ID, p.DueAt
	}
	// expect checks what the last statements did as by.
	var from payment.Status
	expect := func(by payment.Actor, name string) {
		t.Helper()
		for _, c := range log.take() {
			if !payment.Allowed(c[0], c[1], by) {
				t.Errorf("%s (%s, seeded %s) moved %s -> %s: not in payment.Moves", name, by, from, c[0], c[1])
				continue
			}
			for _, m := range payment.Moves {
				if m.From == c[0] && m.To == c[1] && m.By == by {
					seen[m] = true
				}
			}
		}
	}
	// cleanup ends every payment so the next claim sees only its own.
	cleanup := func() {
		t.Helper()
		if _, err := db.Exec(ctx, `UPDATE payments SET status = 'FAILED', lease_until = NULL WHERE status IN ('PENDING', 'PROCESSING')`); err != nil {
			t.Fatal(err)
		}
		log.take()
	}

	for _, s := range payment.Statuses {
		from = s
		func() {
			// Sweeper: claim, and release of a batch an executor refused.
			seed(s, false)
			claimed, err := store.Claim(ctx, db, "sweeper-1", time.Minute, 10)
			if err != nil {
				t.Fatal(err)
			}
			expect(payment.Sweeper, "Claim")
			if _, err := store.Release(ctx, db, "sweeper-1", claimed); err != nil {
				t.Fatal(err)
			}
			expect(payment.Sweeper, "Release")
			cleanup()

			// Client: cancel.
			id, _ := seed(s, false)
			_, _ = st.Cancel(ctx, "mover", id)
			expect(payment.Client, "Cancel")
			cleanup()

			// Executor: every outcome the executor records.
			for _, tr := range []store.Transition{
				{Outcome: payment.Succeeded, Status: payment.Completed, Ref: "ch_1"},
				{Outcome: payment.Declined, Status: payment.Failed},
				{Outcome: payment.Retryable, Status: payment.Pending, NewRetries: 1, RunAt: time.Now()},
				{Outcome: payment.Ambiguous, Status: payment.Pending, NewRetries: 1, ProbeFirst: true},
				{Status: payment.Pending}, // a release: no call was made
				{Outcome: payment.Ambiguous, Status: payment.DeadLettered, DeadReason: payment.AmbiguousUnresolved},
				{Outcome: payment.KeyConflict, Status: payment.DeadLettered, DeadReason: payment.KeyConflicted},
			} {
				id, due := seed(s, false)
				tr.ClaimRef = store.ClaimRef{ID: id, DueTime: due, Attempt: 1}
				if _, err := store.Complete(ctx, db, "executor-1", []store.Transition{tr}); err != nil {
					t.Fatal(err)
				}
				expect(payment.Executor, "Complete "+string(tr.Outcome))
				cleanup()
			}
			// The executor refuses to make a move the table does not list.
			id, due := seed(s, false)
			if _, err := store.Complete(ctx, db, "executor-1", []store.Transition{{ClaimRef: store.ClaimRef{ID: id, DueTime: due, Attempt: 1},
				Status: payment.Cancelled}}); err == nil {
				t.Errorf("Complete moved a payment to CANCELLED as the executor")
			}
			cleanup()

			// Reaper: lease expiry.
			seed(s, false)
			if _, err := store.ExpireLeases(ctx, db, 100); err != nil {
				t.Fatal(err)
			}
			expect(payment.Reaper, "ExpireLeases")
			cleanup()

			// Reconciler: the daily run's repair of a settled charge.
			id, d := seed(s, true)
			repair(t, db, id, d)
			expect(payment.Reconciler, "RepairSettled")
			cleanup()

			// Webhook, resolver, operator: Apply to every status.
			for _, by := range []payment.Actor{payment.Webhook, payment.Resolver, payment.Operator, payment.Reconciler} {
				for _, to := range payment.Statuses {
					id, _ := seed(s, true)
					// The amount the gateway speaks of is the payment's (a
					// webhook names it, or moves nothing).
					_, _ = store.Apply(ctx, db, store.OutOfBandMove{ID: id, By: by, To: to, Actor: string(by), Action: "TEST", Reason: "test",
						Amount: 100, Currency: "USD"})
					expect(by, fmt.Sprintf("Apply to %s", to))
					cleanup()
				}
			}
		}()
	}
	for _, m := range payment.Moves {
		if !seen[m] {
			t.Errorf("payment.Moves lists %s -> %s by %s (%s), but no statement in pkg/store made it", m.From, m.To, m.By, m.Name)
		}
	}
}

// repair runs the reconciler's repair over a report that settles id.
func repair(t *testing.T, db *pgxpool.Pool, id uuid.UUID, due time.Time) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var runID int64
	if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_runs (day, triggered_by) VALUES (current_date, 'test') RETURNING id`).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	// The run's temporary tables as the reconciler makes them (they stay
	// with the pooled session: emptied first, in case an earlier test left
	// rows).
	if _, err := tx.Exec(ctx, reconciledb.ReportTables); err != nil {
		t.Fatal(err)
	}
	if err := reconciledb.New(tx).ClearReport(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO settle VALUES ('ch_r', $2, $1, 100, 'USD', now())`, id, id.String()); err != nil {
		t.Fatal(err)
	}
	lo, hi := due.Add(-time.Hour), due.Add(time.Hour)
	if err := store.MatchSettled(ctx, tx, lo, hi); err != nil {
		t.Fatal(err)
	}
	if err := store.RepairSettled(ctx, tx, runID, "today", lo, hi); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseMovesAreTheGoMoves: the state machine the database enforces
// (paysched_move_actors, migration 12, used by the trigger on payments)
// is payment.Moves, move for move and actor for actor.
func TestDatabaseMovesAreTheGoMoves(t *testing.T) {
	db := pgtest.NewPool(t)
	for _, from := range payment.Statuses {
		for _, to := range payment.Statuses {
			var got []string
			if err := db.QueryRow(context.Background(), `SELECT paysched_move_actors($1, $2)`, string(from), string(to)).Scan(&got); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, m := range payment.Moves {
				if m.From == from && m.To == to && !slices.Contains(want, string(m.By)) {
					want = append(want, string(m.By))
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s -> %s: the database allows %v, payment.Moves %v", from, to, got, want)
			}
		}
	}
}
