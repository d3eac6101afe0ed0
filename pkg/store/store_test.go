package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newPayment(key string, due time.Time, amount int64) store.NewPayment {
	id, _ := uuid.NewV7()
	return store.NewPayment{
		ID: id, Payee: "bob", Amount: amount, Currency: "USD", DueAt: due, CreatedAt: time.Now(),
		IdempotencyKey: key, RequestHash: []byte(fmt.Sprintf("hash-%d", amount)), Response: []byte("resp-" + id.String()),
	}
}

// as sets the payer of items.
func as(payer string, items ...store.NewPayment) []store.NewPayment {
	for i := range items {
		items[i].Payer = payer
	}
	return items
}

func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConcurrentIdenticalCreatesMakeOnePayment(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	due := time.Now().Add(time.Hour)
	const n = 100
	results := make([]store.CreateResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Each caller builds its own id and response, as the API does;
			// only one may win.
			rs, err := st.Create(context.Background(), as("alice", newPayment("same-key", due, 100)))
			if err == nil {
				results[i] = rs[0]
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("create %d: %v", i, errs[i])
		}
		if results[i].Kind == store.Created {
			created++
		}
		if !bytes.Equal(results[i].Response, results[0].Response) {
			t.Fatalf("response %d differs: %q vs %q", i, results[i].Response, results[0].Response)
		}
	}
	if created != 1 {
		t.Fatalf("created %d payments, want 1", created)
	}
	if got := count(t, db, `SELECT count(*) FROM payments`); got != 1 {
		t.Fatalf("payments rows = %d, want 1", got)
	}
}

func TestIdempotencyKeysAreScopedPerActor(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	ctx := context.Background()
	due := time.Now().Add(time.Hour)
	for _, actor := range []string{"alice", "bob"} {
		rs, err := st.Create(ctx, as(actor, newPayment("k", due, 100)))
		if err != nil || rs[0].Kind != store.Created {
			t.Fatalf("%s: %v %+v", actor, err, rs)
		}
	}
	rs, err := st.Create(ctx, as("alice", newPayment("k", due, 200)))
	if err != nil || rs[0].Kind != store.KeyReused {
		t.Fatalf("reuse with another body: %v %+v", err, rs)
	}
	if got := count(t, db, `SELECT count(*) FROM payments`); got != 2 {
		t.Fatalf("payments = %d, want 2", got)
	}
}

func TestBatchWithDuplicateKeys(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	due := time.Now().Add(time.Hour)
	a, b, c := newPayment("a", due, 1), newPayment("a", due, 1), newPayment("a", due, 2)
	rs, err := st.Create(context.Background(), as("alice", a, b, c))
	if err != nil {
		t.Fatal(err)
	}
	want := []store.CreateKind{store.Created, store.Replayed, store.KeyReused}
	for i := range want {
		if rs[i].Kind != want[i] {
			t.Fatalf("item %d outcome %v, want %v", i, rs[i].Kind, want[i])
		}
	}
	if !bytes.Equal(rs[1].Response, a.Response) {
		t.Fatal("replayed item must return the first item's response")
	}
}

// insertDue writes a PENDING payment that is already due, as the clock would
// make it; the API never accepts a past dueAt.
func insertDue(t *testing.T, db *pgxpool.Pool, payer string) uuid.UUID {
	t.Helper()
	p := newPayment(uuid.NewString(), time.Now().Add(time.Hour), 100)
	if _, err := store.NewStore(db).Create(context.Background(), as(payer, p)); err != nil {
		t.Fatal(err)
	}
	_, err := db.Exec(context.Background(), `
		WITH moved AS (
			DELETE FROM payments WHERE id = $1 RETURNING *)
		INSERT INTO payments SELECT id, payer, payee, amount_minor, currency,
			now() - interval '1 second', now() - interval '1 second', status, attempt, lease_until,
			lease_owner, last_error, dead_letter_reason, gateway_ref, description, metadata, created_at, updated_at
		FROM moved`, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(context.Background(),
		`UPDATE payment_index SET due_time = (SELECT due_time FROM payments WHERE id = $1) WHERE id = $1`, p.ID); err != nil {
		t.Fatal(err)
	}
	return p.ID
}

// TestCancelRacesClaim runs cancel against the claim's conditional UPDATE on
// the same due row, 1,000 times: exactly one side must win every time, and
// the row must say which.
func TestCancelRacesClaim(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	ctx := context.Background()
	wins := map[string]int{}
	for trial := range 1000 {
		id := insertDue(t, db, "alice")
		var (
			wg        sync.WaitGroup
			cancelErr error
			claimed   []store.Claimed
			claimErr  error
		)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, cancelErr = st.Cancel(ctx, "alice", id)
		}()
		go func() {
			defer wg.Done()
			<-start
			claimed, claimErr = store.Claim(ctx, db, "sweeper-test", time.Minute, 10)
		}()
		close(start)
		wg.Wait()
		if claimErr != nil {
			t.Fatalf("trial %d: claim: %v", trial, claimErr)
		}
		cancelWon := cancelErr == nil
		claimWon := len(claimed) == 1 && claimed[0].ID == id
		if cancelErr != nil && !errors.Is(cancelErr, store.ErrAlreadyProcessing) {
			t.Fatalf("trial %d: cancel: %v", trial, cancelErr)
		}
		if cancelWon == claimWon {
			t.Fatalf("trial %d: cancel won=%v claim won=%v: exactly one must win", trial, cancelWon, claimWon)
		}
		var status string
		if err := db.QueryRow(ctx, `SELECT status FROM payments WHERE id = $1`, id).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if (cancelWon && status != "CANCELLED") || (claimWon && status != "PROCESSING") {
			t.Fatalf("trial %d: status %s disagrees with the winner (cancel=%v)", trial, status, cancelWon)
		}
		if cancelWon {
			wins["cancel"]++
		} else {
			wins["claim"]++
		}
	}
	t.Logf("wins: %v", wins)
}

func TestCancelIsIdempotentAndScoped(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	ctx := context.Background()
	p := newPayment("k", time.Now().Add(time.Hour), 100)
	if _, err := st.Create(ctx, as("alice", p)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(ctx, "bob", p.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another actor's cancel: %v, want not found", err)
	}
	for range 2 {
		got, err := st.Cancel(ctx, "alice", p.ID)
		if err != nil || got.Status != payment.Cancelled {
			t.Fatalf("cancel: %v %+v", err, got)
		}
	}
}

// TestCancelRefusedWhileAChargeMayLand: a PENDING payment that an earlier
// attempt may have charged (probe_first: its lease expired, or the gateway
// gave no definitive answer) cannot be cancelled until an attempt has asked
// the gateway: a 200 would promise "not charged".
func TestCancelRefusedWhileAChargeMayLand(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	ctx := context.Background()
	p := newPayment("k", time.Now().Add(time.Hour), 100)
	if _, err := st.Create(ctx, as("alice", p)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE payments SET probe_first = true, attempt = 1, retries = 1 WHERE id = $1`, p.ID); err != nil {
		t.Fatal(err)
	}
	got, err := st.Cancel(ctx, "alice", p.ID)
	if !errors.Is(err, store.ErrAlreadyProcessing) || got.Status != payment.Pending {
		t.Fatalf("cancel of a payment that may be charged: %v %+v, want ALREADY_PROCESSING", err, got)
	}
}

// TestOperatorMoveIsFencedOnTheAttemptItRead: an operator's move names the
// attempt it read before asking the gateway; a claim since (which may
// have charged, and may have come back to PENDING) makes it miss, and it
// moves nothing. Many movers racing on one row: at most the one at the
// current attempt wins.
func TestOperatorMoveIsFencedOnTheAttemptItRead(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	ctx := context.Background()
	p := newPayment("k", time.Now().Add(time.Hour), 100)
	if _, err := st.Create(ctx, as("alice", p)); err != nil {
		t.Fatal(err)
	}
	// Read at attempt 0; a claim and a retry since: attempt 1, PENDING again.
	if _, err := db.Exec(ctx, `UPDATE payments SET attempt = 1, probe_first = true WHERE id = $1`, p.ID); err != nil {
		t.Fatal(err)
	}
	// Attempt 0 (never claimed when read) is a fence like any other.
	if _, err := store.Apply(ctx, db, store.OutOfBandMove{ID: p.ID, By: payment.Operator, To: payment.Cancelled, Fenced: true, Attempt: 0,
		Actor: "admin:ops", Action: "CANCEL", Reason: "read before the claim"}); !errors.Is(err, store.ErrNotMoved) {
		t.Fatalf("a move fenced on attempt 0 at attempt 1: %v, want ErrNotMoved", err)
	}
	var wg sync.WaitGroup
	var won atomic.Int32
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := store.Apply(ctx, db, store.OutOfBandMove{ID: p.ID, By: payment.Operator, To: payment.Cancelled, Fenced: true, Attempt: int32(i % 2),
				Actor: "admin:ops", Action: "CANCEL", Reason: "race"})
			switch {
			case err == nil && i%2 == 0:
				t.Errorf("a move fenced on attempt 0 applied at attempt 1")
			case err == nil:
				won.Add(1)
			case !errors.Is(err, store.ErrNotMoved):
				t.Errorf("move: %v", err)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d moves at the current attempt applied, want exactly 1", won.Load())
	}
}

// TestListIsStableUnderConcurrentInserts pages through an actor's payments
// while another goroutine keeps inserting: no row may repeat, and every row
// that existed before paging began must be seen.
func TestListIsStableUnderConcurrentInserts(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	ctx := context.Background()
	due := time.Now().Add(time.Hour)
	var before []store.NewPayment
	for i := range 300 {
		before = append(before, newPayment(fmt.Sprintf("pre-%d", i), due, int64(i+1)))
	}
	if _, err := st.Create(ctx, as("alice", before...)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := st.Create(ctx, as("alice", newPayment(fmt.Sprintf("during-%d", i), due, 7))); err != nil {
				done <- err
				return
			}
		}
	}()
	seen := map[uuid.UUID]bool{}
	var cursor int64
	for {
		page, err := st.List(ctx, "alice", "", cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range page {
			if seen[p.ID] {
				t.Fatalf("payment %s repeated", p.ID)
			}
			seen[p.ID] = true
			if i > 0 && page[i-1].Seq <= p.Seq {
				t.Fatal("page not newest first")
			}
		}
		if len(page) < 7 {
			break
		}
		cursor = page[len(page)-1].Seq
		time.Sleep(time.Millisecond) // let inserts interleave with paging
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, p := range before {
		if !seen[p.ID] {
			t.Fatalf("payment %s that existed before paging was skipped", p.ID)
		}
	}
}

func TestStatusFilterAndScoping(t *testing.T) {
	db := pgtest.NewPool(t)
	st := store.NewStore(db)
	ctx := context.Background()
	due := time.Now().Add(time.Hour)
	a, b := newPayment("a", due, 1), newPayment("b", due, 2)
	if _, err := st.Create(ctx, as("alice", a, b)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, as("bob", newPayment("c", due, 3))); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Cancel(ctx, "alice", a.ID); err != nil {
		t.Fatal(err)
	}
	got, err := st.List(ctx, "alice", payment.Cancelled, 0, 10)
	if err != nil || len(got) != 1 || got[0].ID != a.ID {
		t.Fatalf("cancelled filter: %v %+v", err, got)
	}
	all, err := st.List(ctx, "alice", "", 0, 10)
	if err != nil || len(all) != 2 || all[0].ID != b.ID {
		t.Fatalf("alice's list: %v %+v", err, all)
	}
	if _, err := st.Get(ctx, "bob", a.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("bob reads alice's payment: %v", err)
	}
}

func TestEnsurePartitionsIsReusable(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	from := time.Now().AddDate(2, 0, 0)
	n, err := store.EnsurePartitions(ctx, db, from, from.AddDate(0, 0, 2))
	if err != nil || n != 3 {
		t.Fatalf("first call: %d %v, want 3 partitions", n, err)
	}
	n, err = store.EnsurePartitions(ctx, db, from, from.AddDate(0, 0, 2))
	if err != nil || n != 0 {
		t.Fatalf("second call: %d %v, want 0", n, err)
	}
	// The migration covered the horizon: a year ahead has a partition.
	if got := count(t, db, `SELECT count(*) FROM pg_class WHERE relname = $1`,
		"payments_p"+time.Now().UTC().AddDate(0, 0, 366).Format("20060102")); got != 1 {
		t.Fatal("no partition at the 1-year horizon")
	}
}

// TestBatcherCoalescesConcurrentCreates drives the group-commit path with
// many goroutines, including a shared key: every caller gets its own answer,
// and the shared key yields one payment.
func TestBatcherCoalescesConcurrentCreates(t *testing.T) {
	db := pgtest.NewPool(t)
	b := store.NewBatcher(store.NewStore(db), 4, 64)
	defer b.Close()
	due := time.Now().Add(time.Hour)
	const n = 200
	var wg sync.WaitGroup
	results := make([]store.CreateResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("k-", i)
			if i%2 == 0 {
				key = "shared"
			}
			p := newPayment(key, due, 5)
			p.Payer = "alice"
			results[i], errs[i] = b.Create(context.Background(), p)
		}()
	}
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if results[i].Kind == store.Created {
			created++
		}
	}
	if created != n/2+1 {
		t.Fatalf("created %d, want %d", created, n/2+1)
	}
	if got := count(t, db, `SELECT count(*) FROM payments`); got != n/2+1 {
		t.Fatalf("payments = %d, want %d", got, n/2+1)
	}
}

// TestClaimsAcrossMidnightByTheClock sets the claimer's clock on either
// side of a midnight, three days ago, and puts one payment half a second
// before it and one half a second after (both due by the database's
// clock): at 23:59:30 the claimer asks tomorrow's partition too (the
// database's clock may be past midnight already), and at 00:00:30 still
// yesterday's, so each clock claims both.
func TestClaimsAcrossMidnightByTheClock(t *testing.T) {
	y, m, d := time.Now().UTC().AddDate(0, 0, -3).Date()
	midnight := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	for _, clock := range []time.Time{midnight.Add(-30 * time.Second), midnight.Add(30 * time.Second)} {
		t.Run(clock.Format("15:04:05"), func(t *testing.T) {
			db := pgtest.NewPool(t)
			ctx := context.Background()
			if _, err := store.EnsurePartitions(ctx, db, midnight.AddDate(0, 0, -2), midnight.AddDate(0, 0, 1)); err != nil {
				t.Fatal(err)
			}
			want := map[uuid.UUID]bool{}
			for _, due := range []time.Time{midnight.Add(-500 * time.Millisecond), midnight.Add(500 * time.Millisecond)} {
				p := newPayment(uuid.NewString(), due, 100)
				if _, err := store.NewStore(db).Create(ctx, as("alice", p)); err != nil {
					t.Fatal(err)
				}
				want[p.ID] = true
			}
			c := &store.Claimer{DB: db, Owner: "sweeper-clock", Lease: time.Minute, Now: func() time.Time { return clock }}
			got, err := c.Claim(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range got {
				delete(want, g.ID)
			}
			if len(want) != 0 {
				t.Fatalf("at %s the claimer left %d of 2 due payments unclaimed", clock.Format(time.TimeOnly), len(want))
			}
		})
	}
}

// A settle reads only the partitions a claim can reach (those due by a
// day from now), not the year of partitions ahead: ~370 index probes a
// tenant made one settle cost 60 ms at a steady 1,000 payments a second.
// Counted by the statistics of the settle's own transaction.
func TestASettleReadsOnlyThePartitionsAClaimReaches(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	p := newPayment(uuid.NewString(), time.Now().Add(time.Minute), 100)
	p.Tenant = "acme"
	if _, err := store.NewStore(db).Create(ctx, as("alice", p)); err != nil {
		t.Fatal(err)
	}
	// In the queue, as a walk would have folded its wakeup.
	if _, err := db.Exec(ctx, `INSERT INTO tenant_queue (tenant, next_at) VALUES ('acme', now()) ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	c := &store.Claimer{DB: tx, Owner: "s"}
	if err := c.SettleTenants(ctx, []string{"acme"}); err != nil {
		t.Fatal(err)
	}
	var touched, all int
	if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE coalesce(idx_scan, 0) + coalesce(seq_scan, 0) > 0), count(*)
		FROM pg_stat_xact_user_tables WHERE relname LIKE 'payments\_p%'`).Scan(&touched, &all); err != nil {
		t.Fatal(err)
	}
	if all < 300 || touched == 0 || touched > 4 {
		t.Fatalf("a settle read %d of %d partitions, want at most 4 (yesterday, today, tomorrow, and the day after near midnight)", touched, all)
	}
	var next time.Time
	if err := tx.QueryRow(ctx, `SELECT next_at FROM tenant_queue WHERE tenant = 'acme'`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if d := next.Sub(p.DueAt); d < -time.Second || d > time.Second {
		t.Fatalf("next_at %s, want the payment's due time %s", next, p.DueAt)
	}
}
