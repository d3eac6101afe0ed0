package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/test/pgtest"
)

// enginePool is a pool planned as the sweeper's and executor's are.
func enginePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	svc.CustomPlans(cfg)
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

// seedDue inserts n PENDING payments due at due.
func seedDue(t *testing.T, db pgdb.DB, n int, due time.Time) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `
		INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at)
		SELECT gen_random_uuid(), 'payer-' || g, 'payee', 100 + g, 'EUR', $2, $2 FROM generate_series(1, $1) g`,
		n, due); err != nil {
		t.Fatal(err)
	}
}

// The Claimer takes due payments of every day that has begun, oldest day
// first, whatever partition they sit in; Load and Complete then write a
// batch spread over several partitions.
func TestClaimLoadCompleteAcrossPartitions(t *testing.T) {
	db := enginePool(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := EnsurePartitions(ctx, db, now.AddDate(0, 0, -5), now); err != nil {
		t.Fatal(err)
	}
	days := []time.Time{now.AddDate(0, 0, -4), now.AddDate(0, 0, -1), now.Add(-time.Second)}
	for _, d := range days {
		seedDue(t, db, 2, d)
	}
	// Not due yet: a retry of four days ago waiting for its backoff.
	if _, err := db.Exec(ctx, `UPDATE payments SET run_at = now() + interval '1 hour'
		WHERE id = (SELECT id FROM payments WHERE due_time = $1 LIMIT 1)`, days[0]); err != nil {
		t.Fatal(err)
	}
	c := &Claimer{DB: db, Owner: "sweeper-t", Lease: time.Minute}
	claimed, err := c.Claim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 5 {
		t.Fatalf("claimed %d, want the 5 due", len(claimed))
	}
	for i := 1; i < len(claimed); i++ {
		if claimed[i].DueTime.Before(claimed[i-1].DueTime) {
			t.Fatalf("claimed out of day order: %v after %v", claimed[i].DueTime, claimed[i-1].DueTime)
		}
	}
	items := make([]ClaimRef, len(claimed))
	for i, cl := range claimed {
		items[i] = ClaimRef{ID: cl.ID, DueTime: cl.DueTime, Attempt: cl.Attempt}
	}
	// A forged item in a day with no partition is not read, and does not
	// spoil the batch.
	items = append(items, ClaimRef{ID: uuid.New(), DueTime: now.AddDate(5, 0, 0), Attempt: 1})
	works, err := LoadClaimed(ctx, db, items)
	if err != nil {
		t.Fatal(err)
	}
	if len(works) != 5 {
		t.Fatalf("loaded %d, want 5", len(works))
	}
	ts := make([]Transition, len(works))
	for i, w := range works {
		ts[i] = Transition{ClaimRef: w.ClaimRef, Outcome: payment.Succeeded, Ref: "ch_" + w.ID.String(), Status: payment.Completed}
	}
	applied, err := Complete(ctx, db, "executor-t", ts)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 5 {
		t.Fatalf("applied %d, want 5", len(applied))
	}
	var completed, attempts int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM payments WHERE status = 'COMPLETED'),
		(SELECT count(*) FROM payment_attempts WHERE outcome = 'SUCCEEDED')`).Scan(&completed, &attempts); err != nil {
		t.Fatal(err)
	}
	if completed != 5 || attempts != 5 {
		t.Fatalf("completed %d, attempt rows %d, want 5 and 5", completed, attempts)
	}
	if again, err := c.Claim(ctx, 10); err != nil || len(again) != 0 {
		t.Fatalf("claim again: %d, %v; want nothing due", len(again), err)
	}
}

// The engine's batch statements are planned for every call; each plan must
// read a spike's partition by its keys, whatever the statistics say: a
// partition never analyzed, and one analyzed before its spike (when no row
// was PROCESSING). A sequential scan there is a whole partition read per
// batch: the spike once ran at a tenth of its rate on such plans. (On a
// small partition a scan may well be the cheaper plan; a spike's is not
// small.)
func TestBatchStatementsReadByKey(t *testing.T) {
	db := enginePool(t)
	ctx := context.Background()
	due := time.Now().UTC().Add(-time.Minute)
	seedDue(t, db, 200000, due)
	part := Partition(due)
	for _, stats := range []string{"never analyzed", "analyzed before the spike"} {
		t.Run(stats, func(t *testing.T) {
			if stats != "never analyzed" {
				if _, err := db.Exec(ctx, `UPDATE payments SET status = 'PENDING', lease_until = NULL`); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Exec(ctx, `ANALYZE `+part); err != nil {
					t.Fatal(err)
				}
			}
			explain := func(name, sql string, args ...any) {
				t.Helper()
				rows, err := db.Query(ctx, "EXPLAIN "+sql, args...)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				var lines []string
				for rows.Next() {
					var l string
					if err := rows.Scan(&l); err != nil {
						t.Fatal(err)
					}
					lines = append(lines, l)
				}
				text := strings.Join(lines, "\n")
				if strings.Contains(text, "Seq Scan on "+part) || strings.Contains(text, "Hash Join") {
					t.Errorf("%s reads the whole partition:\n%s", name, text)
				}
				if strings.HasPrefix(name, "claim") && !strings.Contains(text, "Tid Scan on "+part) {
					t.Errorf("%s does not reach the rows it locked by their tuple ids:\n%s", name, text)
				}
			}
			explain("claim", partitionSQL(claimSQL, due), "sweeper-t", time.Minute, 1000)
			explain("claim, fair shares", partitionSQL(fairClaimSQL, due), "sweeper-t", time.Minute, []string{"tenant-a", "tenant-b"}, []int32{500, 500})
			claimed, err := (&Claimer{DB: db, Owner: "sweeper-t", Lease: time.Minute}).Claim(ctx, 1000)
			if err != nil || len(claimed) != 1000 {
				t.Fatalf("claim: %d, %v", len(claimed), err)
			}
			ids := make([][16]byte, len(claimed))
			dues := make([]time.Time, len(claimed))
			attempts := make([]int32, len(claimed))
			strs := make([]string, len(claimed))
			runs := make([]*time.Time, len(claimed))
			bools := make([]bool, len(claimed))
			starts := make([]time.Time, len(claimed))
			for i, c := range claimed {
				ids[i], dues[i], attempts[i], starts[i] = c.ID, c.DueTime, c.Attempt, time.Now()
				strs[i] = string(payment.Completed)
			}
			explain("load", partitionSQL(loadSQL, due), ids, dues, attempts)
			explain("complete", partitionSQL(completeSQL, due), ids, dues, attempts, strs, runs, attempts, strs, strs, strs, bools, strs, starts, "executor-t",
				attempts, strs)
			explain("release", partitionSQL(releaseSQL, due), ids, dues, attempts, "sweeper-t")
		})
	}
}
