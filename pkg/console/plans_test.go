package console

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/payment"
)

// Every search is one index range and bounded: the plans of each shape,
// on 20,000 analysed payments, use the index named and scan no table but
// the empty partitions of the days ahead.
// The plans are printed (go test -v) as the note shows them at 5M
// (make bench-console).
func TestSearchPlansAreIndexedAndBounded(t *testing.T) {
	h := newHarness(t, Config{})
	h.payers = 20
	ctx := context.Background()
	now := time.Now()
	// The payments are due ahead, later today: the plans are those of a
	// day whose rows are not yet due. Due an hour ahead, after 23:00 UTC they
	// sat in tomorrow's partition, which the dead-letter statements
	// (due_time <= now()) prune, so those plans scanned only empty
	// partitions, with no index to name. Close to midnight, wait it out.
	ahead := time.Hour
	if left := time.Until(now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)); left < 5*time.Minute {
		time.Sleep(left + time.Second)
		now = time.Now()
	} else if left-2*time.Minute < ahead {
		ahead = left - 2*time.Minute
	}
	ids := h.schedule(20000, now.Add(ahead), 700)
	h.deadLetter(ids[:300])
	if _, err := h.db.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	far := now.Add(48 * time.Hour)
	dues := make([]time.Time, 50)
	for i := range dues {
		dues[i] = now.Add(time.Hour)
	}
	for _, c := range []struct {
		name, sql string
		args      []any
		index     string
	}{
		{"by id", byIDSQL, []any{ids[7]}, "payment_index_pkey"},
		{"by payer and key", byKeySQL, []any{"alice-7", "k-" + ids[7].String()}, "payment_index_idempotency_idx"},
		{"by payer", byPayerSQL, []any{"alice-7", now, uuid.Nil, far, scanCap}, "payment_index_payer_due"},
		{"by payee", byPayeeSQL, []any{"bob-7", now, uuid.Nil, far, scanCap}, "payment_index_payee_due"},
		{"by due range", byDueSQL, []any{now, uuid.Nil, far, scanCap}, "payment_index_due"},
		{"the candidates' rows", rowsSQL, []any{ids[:50], dues, "COMPLETED", ""}, "pkey"},
		{"dead letters of a due range", deadWalkSQL, []any{now, uuid.Nil, far, scanCap}, "Index Scan using payments_p"},
		{"dead letters", deadWalkSQL, []any{time.Unix(0, 0), uuid.Nil, farFuture, scanCap}, "Index Scan using payments_p"},
		{"dead-letter count", deadCountSQL, []any{"", maxBulk + 1}, "due_time_id_idx"},
		{"dead-letter selection", deadSelectionSQL, []any{nil, "", maxBulk + 1, nil}, "due_time_id_idx"},
		{"open status count", cappedCountSQL(payment.DeadLettered), []any{countCap + 1}, "Index"},
		{"forecast", forecastSQL, nil, "run_at_idx"},
	} {
		rows, err := h.db.Query(ctx, "EXPLAIN "+c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		p := strings.Join(plan, "\n")
		t.Logf("%s:\n%s", c.name, p)
		if !strings.Contains(p, c.index) {
			t.Errorf("%s: the plan does not use %s", c.name, c.index)
		}
		// A scan of an empty partition (the days ahead) costs nothing.
		for _, line := range plan {
			if strings.Contains(line, "Seq Scan on payment") && !strings.Contains(line, "cost=0.00..0.00 ") {
				t.Errorf("%s: the plan scans a table: %s", c.name, line)
			}
		}
	}
}

// Keyset paging visits every match once, in due order, however many
// pages.
func TestSearchPagesThroughEverything(t *testing.T) {
	h := newHarness(t, Config{})
	now := time.Now()
	ids := h.schedule(1000, now.Add(time.Hour), 700) // 20 for each of bob-0..bob-49
	h.deadLetter(ids[:100])
	seen := map[uuid.UUID]bool{}
	q := url.Values{"payee": {"bob-3"}}
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("paging does not end")
		}
		pq, err := parseQuery(q, now)
		if err != nil {
			t.Fatal(err)
		}
		res, err := search(context.Background(), h.db, pq)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Rows {
			if seen[r.ID] || r.Payee != "bob-3" {
				t.Fatalf("row %v twice or wrong", r)
			}
			seen[r.ID] = true
		}
		if res.Next == "" {
			break
		}
		q.Set("after", res.Next)
	}
	if len(seen) != 20 {
		t.Fatalf("saw %d of 20", len(seen))
	}
	// A status narrows after the index: the dead letters among them.
	pq, _ := parseQuery(url.Values{"payer": {"alice"}, "status": {"DEAD_LETTERED"}}, now)
	res, err := search(context.Background(), h.db, pq)
	if err != nil || len(res.Rows) != pageSize || res.Next == "" {
		t.Fatalf("status filter: %d rows, next %q, %v", len(res.Rows), res.Next, err)
	}
	for _, r := range res.Rows {
		if r.Status != "DEAD_LETTERED" {
			t.Fatal(fmt.Sprint("status ", r.Status))
		}
	}
}
