package reaper_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/engine/reaper"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newReaper(t *testing.T, db *pgxpool.Pool) *reaper.Reaper {
	t.Helper()
	r, err := reaper.New(reaper.Config{Interval: time.Second, Horizon: 24 * time.Hour, KeyTTL: time.Hour, Batch: 2,
		OrphanAfter: time.Minute},
		db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// processing writes a PROCESSING payment whose lease has expired.
func processing(t *testing.T, db *pgxpool.Pool, retries int, started bool) uuid.UUID {
	t.Helper()
	id, _ := uuid.NewV7()
	ctx := context.Background()
	_, err := db.Exec(ctx, `INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status, attempt,
		retries, lease_until, lease_owner) VALUES ($1, 'a', 'b', 1, 'USD', now() - interval '1 min', now() - interval '1 min',
		'PROCESSING', 3, $2, now() - interval '1 s', 'gone')`, id, retries)
	if err != nil {
		t.Fatal(err)
	}
	if started {
		if _, err := db.Exec(ctx, `INSERT INTO payment_attempts (payment_id, attempt, gateway_key) VALUES ($1, 3, $2)`, id, id.String()); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

func TestExpiredLeases(t *testing.T) {
	db := pgtest.NewPool(t)
	r := newReaper(t, db)
	retry := processing(t, db, 0, true)
	spent := processing(t, db, 2, true)
	unstarted := processing(t, db, 2, false)
	n, err := r.ExpireLeases(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("expired %d, %v", n, err)
	}
	check := func(id uuid.UUID, wantStatus string, wantRetries, wantAttempt int, wantOutcome string) {
		t.Helper()
		var st string
		var retries, attempt int
		var reason *string
		if err := db.QueryRow(context.Background(), `SELECT status, retries, attempt, dead_letter_reason FROM payments WHERE id = $1`, id).
			Scan(&st, &retries, &attempt, &reason); err != nil {
			t.Fatal(err)
		}
		if st != wantStatus || retries != wantRetries || attempt != wantAttempt {
			t.Fatalf("%s: %s retries=%d attempt=%d, want %s %d %d", id, st, retries, attempt, wantStatus, wantRetries, wantAttempt)
		}
		if wantStatus == "DEAD_LETTERED" && (reason == nil || *reason != "RETRIES_EXHAUSTED") {
			t.Fatalf("dead letter reason %v", reason)
		}
		var outcome string
		_ = db.QueryRow(context.Background(), `SELECT COALESCE(outcome, '') FROM payment_attempts WHERE payment_id = $1`, id).Scan(&outcome)
		if outcome != wantOutcome {
			t.Fatalf("%s: attempt outcome %q, want %q", id, outcome, wantOutcome)
		}
	}
	check(retry, "PENDING", 1, 3, "ABANDONED") // attempt kept: the same gateway key retries
	// Budget spent: back to PENDING all the same; the executor alone decides
	// the budget (payment.Backoff.Spent) and dead-letters it when claimed.
	check(spent, "PENDING", 3, 3, "ABANDONED")
	check(unstarted, "PENDING", 2, 3, "") // never started: no budget spent
	if n, err := r.ExpireLeases(context.Background()); err != nil || n != 0 {
		t.Fatalf("second pass: %d %v", n, err)
	}
}

func TestExpireKeysForgetsOnlyOldOnes(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	ctx := context.Background()
	var items []store.NewPayment
	for i := range 5 {
		id, _ := uuid.NewV7()
		created := time.Now()
		if i < 3 {
			created = created.Add(-2 * time.Hour)
		}
		items = append(items, store.NewPayment{ID: id, Payer: "a", Payee: "b", Amount: 1, Currency: "USD",
			DueAt: time.Now().Add(time.Hour), CreatedAt: created, IdempotencyKey: id.String(), RequestHash: []byte{1}, Response: []byte{1}})
	}
	if _, err := st.Create(ctx, items); err != nil {
		t.Fatal(err)
	}
	n, err := newReaper(t, db).ExpireKeys(ctx, time.Now().Add(-time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("expired %d keys, %v; want 3", n, err)
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM payment_index WHERE idempotency_key IS NOT NULL`).Scan(&left); err != nil || left != 2 {
		t.Fatalf("keys left %d %v", left, err)
	}
	// The key is forgotten, the payment is not: the same key may be used again.
	if rs, err := st.Create(ctx, []store.NewPayment{func() store.NewPayment {
		p := items[0]
		p.ID, _ = uuid.NewV7()
		return p
	}()}); err != nil || rs[0].Kind != store.Created {
		t.Fatalf("reuse of an expired key: %v %v", err, rs)
	}
}

func TestDropOldPartitions(t *testing.T) {
	db := pgtest.NewPool(t)
	n, err := newReaper(t, db).DropOldPartitions(context.Background(), time.Now())
	if err != nil || n != 1 { // yesterday's
		t.Fatalf("dropped %d, %v", n, err)
	}
}

// TestCloseOrphans: an unfinished attempt whose payment moved on is closed
// once old enough; the current attempt of a PROCESSING payment is not.
func TestCloseOrphans(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	st := store.NewStore(db)
	mk := func(status string, attempt int, attemptRow int, age time.Duration) uuid.UUID {
		id, _ := uuid.NewV7()
		if _, err := st.Create(ctx, []store.NewPayment{{ID: id, Payer: "a", Payee: "b", Amount: 1, Currency: "USD",
			DueAt: time.Now().Add(time.Hour), CreatedAt: time.Now(), IdempotencyKey: id.String(), RequestHash: []byte{1}, Response: []byte{1}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `UPDATE payments SET status = $2, attempt = $3 WHERE id = $1`, id, status, attempt); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO payment_attempts (payment_id, attempt, gateway_key, started_at)
			VALUES ($1, $2, $3, now() - $4::interval)`, id, attemptRow, id.String(), age); err != nil {
			t.Fatal(err)
		}
		return id
	}
	orphan := mk("PENDING", 3, 2, time.Hour)     // the claim moved on long ago
	young := mk("PENDING", 3, 2, time.Second)    // maybe a slow executor: leave it
	current := mk("PROCESSING", 1, 1, time.Hour) // the lease path owns this one
	n, err := newReaper(t, db).CloseOrphans(ctx)
	if err != nil || n != 1 {
		t.Fatalf("closed %d, %v; want 1", n, err)
	}
	for id, want := range map[uuid.UUID]string{orphan: "ABANDONED", young: "", current: ""} {
		var got string
		if err := db.QueryRow(ctx, `SELECT COALESCE(outcome, '') FROM payment_attempts WHERE payment_id = $1`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: outcome %q, want %q", id, got, want)
		}
	}
}
