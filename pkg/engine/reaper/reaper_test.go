package reaper_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/engine/reaper"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newReaper(t *testing.T, db *pgxpool.Pool) *reaper.Reaper {
	t.Helper()
	r, err := reaper.New(reaper.Config{Interval: time.Second, Horizon: 24 * time.Hour, KeyTTL: time.Hour, Batch: 2},
		db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// processing writes a PROCESSING payment at attempt 3 whose lease has expired.
func processing(t *testing.T, db *pgxpool.Pool, retries int, recorded bool) uuid.UUID {
	t.Helper()
	id, _ := uuid.NewV7()
	ctx := context.Background()
	_, err := db.Exec(ctx, `INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status, attempt,
		retries, lease_until, lease_owner) VALUES ($1, 'a', 'b', 1, 'USD', now() - interval '1 min', now() - interval '1 min',
		'PROCESSING', 3, $2, now() - interval '1 s', 'gone')`, id, retries)
	if err != nil {
		t.Fatal(err)
	}
	if recorded {
		// An executor's outcome written just before the lease expired.
		if _, err := db.Exec(ctx, `INSERT INTO payment_attempts (payment_id, attempt, gateway_key, outcome, finished_at)
			VALUES ($1, 3, $2, 'SUCCEEDED', now())`, id, id.String()); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// TestExpiredLeases: every expired claim may have reached the gateway, so
// each goes back to PENDING with probe_first set (the next attempt asks
// first) and one retry spent, and its attempt is recorded as ABANDONED;
// an attempt row the executor wrote first is kept. The budget is not
// judged here.
func TestExpiredLeases(t *testing.T) {
	db := pgtest.NewPool(t)
	r := newReaper(t, db)
	retry := processing(t, db, 0, false)
	spent := processing(t, db, 2, false)
	recorded := processing(t, db, 1, true)
	n, err := r.ExpireLeases(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("expired %d, %v", n, err)
	}
	check := func(id uuid.UUID, wantRetries int, wantOutcome string) {
		t.Helper()
		var st string
		var retries, attempt int
		var probeFirst bool
		if err := db.QueryRow(context.Background(), `SELECT status, retries, attempt, probe_first FROM payments WHERE id = $1`, id).
			Scan(&st, &retries, &attempt, &probeFirst); err != nil {
			t.Fatal(err)
		}
		if st != string(payment.Pending) || retries != wantRetries || attempt != 3 || !probeFirst {
			t.Fatalf("%s: %s retries=%d attempt=%d probe_first=%v, want PENDING %d 3 true", id, st, retries, attempt, probeFirst, wantRetries)
		}
		var outcome string
		_ = db.QueryRow(context.Background(), `SELECT COALESCE(outcome, '') FROM payment_attempts WHERE payment_id = $1 AND attempt = 3`, id).Scan(&outcome)
		if outcome != wantOutcome {
			t.Fatalf("%s: attempt outcome %q, want %q", id, outcome, wantOutcome)
		}
	}
	check(retry, 1, string(payment.Abandoned))
	check(spent, 3, string(payment.Abandoned)) // the executor dead-letters it after a probe
	check(recorded, 2, string(payment.Succeeded))
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

// TestDropOldPartitions: retention drops days past the floor whose
// payments are all at an end, keeps one that still holds an open payment,
// and refuses a cutoff within the floor, in the database and in the
// reaper's own configuration.
func TestDropOldPartitions(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	// Days counted from one noon, taken once: a midnight passing during
	// the test moves none of them.
	y, m, d := time.Now().UTC().Date()
	noon := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
	old := func(days int) time.Time { return noon.AddDate(0, 0, -days) }
	for _, d := range []int{40, 41} {
		day := old(d)
		if _, err := db.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF payments FOR VALUES FROM ('%s') TO ('%s')`,
			store.Partition(day), day.Format(time.DateOnly), day.AddDate(0, 0, 1).Format(time.DateOnly))); err != nil {
			t.Fatal(err)
		}
	}
	// Day 41 still holds a dead letter: kept.
	if _, err := db.Exec(ctx, `INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status)
		VALUES (gen_random_uuid(), 'a', 'b', 1, 'USD', $1, $1, 'DEAD_LETTERED')`, old(41)); err != nil {
		t.Fatal(err)
	}
	r := newReaper(t, db)
	// Well within the floor, on either side of a midnight.
	if _, err := r.DropOldPartitions(ctx, old(20)); err == nil {
		t.Fatal("a cutoff within the 30-day floor was accepted")
	}
	if n, err := r.DropOldPartitions(ctx, old(35)); err != nil || n != 1 {
		t.Fatalf("dropped %d, %v; want day 40's only", n, err)
	}
	var kept int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = $1`, store.Partition(old(41))).Scan(&kept); err != nil || kept != 1 {
		t.Fatalf("the partition with a dead letter was dropped (%v)", err)
	}
	if _, err := reaper.New(reaper.Config{Interval: time.Second, Horizon: 24 * time.Hour, KeyTTL: time.Hour, Batch: 2, Retention: 24 * time.Hour},
		db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Fatal("--retention 24h under the floor was accepted")
	}
}
