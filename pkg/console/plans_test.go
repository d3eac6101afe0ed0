package console

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/console/consoledb"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
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
	// The payments fall on one fixed day, yesterday at noon: its partition
	// always exists and is always at or before now(), which the
	// dead-letter statements bound by, whatever the hour of the run (due
	// ahead, near midnight they fell in tomorrow's partition, which those
	// statements prune, and the plans scanned only empty partitions).
	y, m, d := time.Now().UTC().AddDate(0, 0, -1).Date()
	at := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
	ids := h.schedule(20000, at, 700)
	h.deadLetter(ids[:300])
	// One tenant per payer, and an attempt with a gateway ref for each of
	// 5,000: the tenant and ref plans are those of a spread, not of one
	// value that matches everything or a table that is empty.
	for _, q := range []string{
		`UPDATE payment_index SET tenant = payer`,
		`UPDATE payment_index SET currency = 'GBP' WHERE id = ANY($1)`,
		`INSERT INTO payment_attempts (payment_id, attempt, gateway_key, outcome, gateway_ref)
		 SELECT id, 1, id::text, 'SUCCEEDED', 'ch_' || n FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, n)`,
		`ANALYZE`,
	} {
		var args []any
		switch {
		case strings.Contains(q, "GBP"):
			args = []any{ids[5300:6300]}
		case strings.Contains(q, "$1"):
			args = []any{ids[300:5300]}
		}
		if _, err := h.db.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	from, far := at.Add(-time.Hour), at.Add(48*time.Hour)
	dues := make([]time.Time, 50)
	for i := range dues {
		dues[i] = at
	}
	// Each case's statement as its generated method sends it.
	walk := func(q Query) func(*consoledb.Queries) error {
		q.AfterAt, q.AfterID, q.To = from, uuid.Nil, far
		w, _ := walkOf(q)
		return func(s *consoledb.Queries) error { _, err := w(ctx, s); return err }
	}
	atRestWalk := func(rest atRest, after, to time.Time) func(*consoledb.Queries) error {
		return func(s *consoledb.Queries) error {
			_, err := rest.walk(ctx, s, after, uuid.Nil, to, scanCap)
			return err
		}
	}
	for _, c := range []struct {
		name  string
		call  func(*consoledb.Queries) error
		index string
	}{
		{"by id", func(s *consoledb.Queries) error { _, err := s.WalkByID(ctx, ids[7]); return err }, "payment_index_pkey"},
		{"by payer and key", walk(Query{Payer: "alice-7", Key: "k-" + ids[7].String()}), "payment_index_idempotency_idx"},
		{"by payer", walk(Query{Payer: "alice-7"}), "payment_index_payer_due"},
		{"by payee", walk(Query{Payee: "bob-7"}), "payment_index_payee_due"},
		{"by due range", walk(Query{}), "payment_index_due"},
		{"by currency and amount", walk(Query{Currency: "GBP", MinAmount: 100, MaxAmount: 1000}), "payment_index_currency_due"},
		{"by tenant", walk(Query{Tenant: "alice-7"}), "payment_index_tenant_due"},
		{"by gateway ref", walk(Query{Ref: "ch_7"}), "payment_attempts_ref_idx"},
		{"the candidates' rows", func(s *consoledb.Queries) error {
			_, err := s.SearchRows(ctx, rowsParams(ids[:50], dues, rowFilter{status: "COMPLETED", currency: "EUR", min: 1,
				max: 1 << 62, errClass: "DECLINED", tenant: "alice"}))
			return err
		}, "pkey"},
		{"dead letters of a due range", atRestWalk(deadLetters, from, far), "Index Scan using payments_p"},
		{"failed payments of a due range", atRestWalk(failedPayments, from, far), "Index Scan using payments_p"},
		{"dead letters", atRestWalk(deadLetters, time.Unix(0, 0), farFuture), "Index Scan using payments_p"},
		// Either partial index of the dead letters serves these: with 300
		// of them the planner reads the smaller and sorts.
		{"dead-letter count", func(s *consoledb.Queries) error {
			_, err := s.CountDeadLetters(ctx, consoledb.CountDeadLettersParams{Reason: "", Max: maxBulk + 1})
			return err
		}, "Index Scan using payments_p"},
		{"dead-letter selection", func(s *consoledb.Queries) error {
			_, err := s.DeadSelection(ctx, consoledb.DeadSelectionParams{Reason: "", Max: maxBulk + 1})
			return err
		}, "Index Scan using payments_p"},
		{"open status count", func(s *consoledb.Queries) error {
			_, err := cappedCount[payment.DeadLettered](s, ctx, countCap+1)
			return err
		}, "Index"},
		{"forecast", func(s *consoledb.Queries) error { _, err := s.Forecast(ctx, now.Add(25*time.Hour)); return err }, "run_at_idx"},
		{"a tenant's dead letters", func(s *consoledb.Queries) error {
			_, err := s.TenantDeadLetters(ctx, consoledb.TenantDeadLettersParams{Tenant: "alice-7", DueBound: at.Add(time.Hour)})
			return err
		}, "Index"},
	} {
		sql, args := sentBy(c.call)
		rows, err := h.db.Query(ctx, "EXPLAIN "+sql, args...)
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

// The reads by (id, due) prune to the candidates' days on a generic plan
// too, the plan pgx's prepared statements run on after five runs: with
// the due times only as an array (no range), that plan probed every
// partition for every id (an export at 5M: 0.9 s, not tens of ms).
func TestCandidateReadsPruneOnAGenericPlan(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	due := time.Now().Add(time.Hour)
	ids := h.schedule(50, due, 700)
	dues, err := consoledb.New(h.db).DuesOf(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := span(dues)
	var parts int
	if err := h.db.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'payments'::regclass`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts < 3 {
		t.Fatalf("%d partitions: nothing to prune", parts)
	}
	for _, c := range []struct {
		name string
		call func(*consoledb.Queries) error
	}{
		{"the candidates' rows", func(s *consoledb.Queries) error {
			_, err := s.SearchRows(ctx, rowsParams(ids, dues, rowFilter{min: 1, max: 1 << 62}))
			return err
		}},
		{"an open selection", func(s *consoledb.Queries) error {
			_, err := s.OpenSelection(ctx, consoledb.OpenSelectionParams{Ids: ids, Status: "PENDING", Dues: dues,
				Lo: lo, Hi: hi, Max: maxBulk + 1})
			return err
		}},
	} {
		sql, args := sentBy(c.call)
		plan, err := genericPlan(ctx, h.db, sql, args)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		scans := 0
		for _, line := range plan {
			if strings.Contains(line, " on payments_p") && strings.Contains(line, "Scan") && !strings.Contains(line, "Bitmap Index") {
				scans++
			}
		}
		t.Logf("%s, generic plan:\n%s", c.name, strings.Join(plan, "\n"))
		if scans > 1 {
			t.Errorf("%s: the generic plan reads %d of %d partitions for one day's rows", c.name, scans, parts)
		}
	}
}

// genericPlan is EXPLAIN ANALYZE of sql with args on its generic plan.
func genericPlan(ctx context.Context, db pgdb.DB, sql string, args []any) ([]string, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// A prepared statement outlives the transaction: gone before it.
	defer func() { _, _ = tx.Exec(ctx, `DEALLOCATE cand`) }()
	// EXECUTE's arguments, as literals (a parameter there is refused).
	marks := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case []uuid.UUID:
			ss := make([]string, len(v))
			for j, id := range v {
				ss[j] = id.String()
			}
			marks[i] = "'{" + strings.Join(ss, ",") + "}'"
		case []time.Time:
			ss := make([]string, len(v))
			for j, t := range v {
				ss[j] = `"` + t.Format(time.RFC3339Nano) + `"`
			}
			marks[i] = "'{" + strings.Join(ss, ",") + "}'"
		case time.Time:
			marks[i] = "'" + v.Format(time.RFC3339Nano) + "'"
		case string:
			marks[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		default:
			marks[i] = fmt.Sprint(v)
		}
	}
	for _, q := range []string{`SET LOCAL plan_cache_mode = force_generic_plan`, `PREPARE cand AS ` + sql} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF) EXECUTE cand(`+strings.Join(marks, ", ")+`)`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, err
		}
		plan = append(plan, line)
	}
	return plan, rows.Err()
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

// TestSearchFilters: tenant, gateway ref, currency, amount range and last
// error each find exactly their payments, alone and together, and the
// CSV export carries the same filters.
func TestSearchFilters(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	now := time.Now()
	ids := h.schedule(40, now.Add(time.Hour), 700) // EUR 700, tenant alice
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := h.db.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	// ids[0:10] tenant acme; ids[10:20] USD 100..1000; ids[20:25] FAILED
	// DECLINED; ids[30] charged as ch_search_30; ids[35:38] dead letters.
	exec(`UPDATE payments SET tenant = 'acme' WHERE id = ANY($1)`, ids[0:10])
	exec(`UPDATE payment_index SET tenant = 'acme' WHERE id = ANY($1)`, ids[0:10])
	for i := 10; i < 20; i++ {
		exec(`UPDATE payments SET currency = 'USD', amount_minor = $2 WHERE id = $1`, ids[i], (i-9)*100)
		exec(`UPDATE payment_index SET currency = 'USD', amount_minor = $2 WHERE id = $1`, ids[i], (i-9)*100)
	}
	exec(`UPDATE payments SET status = 'FAILED', failure_reason = 'DECLINED', attempt = 1 WHERE id = ANY($1)`, ids[20:25])
	exec(`INSERT INTO payment_attempts (payment_id, attempt, gateway_key, outcome, gateway_ref) VALUES ($1, 1, $2, 'SUCCEEDED', 'ch_search_30')`, ids[30], ids[30].String())
	h.deadLetter(ids[35:38]) // RETRIES_EXHAUSTED
	in := func(xs []uuid.UUID) map[uuid.UUID]bool {
		m := map[uuid.UUID]bool{}
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	for _, c := range []struct {
		name string
		q    url.Values
		want map[uuid.UUID]bool
	}{
		{"tenant", url.Values{"tenant": {"acme"}}, in(ids[0:10])},
		{"tenant and status", url.Values{"tenant": {"alice"}, "status": {"FAILED"}}, in(ids[20:25])},
		{"gateway ref", url.Values{"ref": {"ch_search_30"}}, in(ids[30:31])},
		{"currency", url.Values{"currency": {"usd"}}, in(ids[10:20])},
		{"amount range", url.Values{"currency": {"USD"}, "min": {"300"}, "max": {"500"}}, in(ids[12:15])},
		{"last error", url.Values{"error": {"DECLINED"}}, in(ids[20:25])},
		{"status FAILED", url.Values{"status": {"FAILED"}}, in(ids[20:25])},
		{"FAILED, USD", url.Values{"status": {"FAILED"}, "currency": {"USD"}}, in(nil)},
		{"dead-letter reason", url.Values{"error": {"RETRIES_EXHAUSTED"}}, in(ids[35:38])},
		{"dead-letter reason, tenant", url.Values{"error": {"RETRIES_EXHAUSTED"}, "tenant": {"acme"}}, in(nil)},
		{"nothing", url.Values{"tenant": {"acme"}, "currency": {"USD"}}, in(nil)},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, err := parseQuery(c.q, now)
			if err != nil {
				t.Fatal(err)
			}
			res, err := search(ctx, h.db, q)
			if err != nil {
				t.Fatal(err)
			}
			got := map[uuid.UUID]bool{}
			for _, r := range res.Rows {
				got[r.ID] = true
				if !c.want[r.ID] {
					t.Errorf("found %s (%s %d %s %s), not asked for", r.ID, r.Currency, r.Amount, r.Status, r.Reason)
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("found %d, want %d", len(got), len(c.want))
			}
			// The export carries the same search.
			rec := h.get(h.as("vera", login.Viewer), "/console/payments.csv?"+q.Values().Encode())
			if lines := strings.Count(strings.TrimSpace(rec.Body.String()), "\n"); rec.Code != 200 || lines != len(c.want) {
				t.Errorf("export: %d, %d rows, want %d", rec.Code, lines, len(c.want))
			}
		})
	}
}
