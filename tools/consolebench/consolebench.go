// Package consolebench is `make bench-console`: it seeds N payments (5M by
// default) with COPY, a month of history and a day ahead, and times every
// console page's server side at that size.
package consolebench

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/console"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// The seeded shape.
const (
	payers = 10000
	payees = 50000
	// aheadShare of the payments are PENDING, due over the next 24 h.
	aheadShare = 25
	history    = 30 * 24 * time.Hour
)

// backfillPartitionsSQL makes the daily partitions from {from} to a week ago,
// named and granted as paysched_ensure_partitions makes them.
const backfillPartitionsSQL = `
DO $$
DECLARE
    d date := '{from}';
    part text;
BEGIN
    WHILE d < current_date - 6 LOOP
        part := format('payments_p%s', to_char(d, 'YYYYMMDD'));
        IF to_regclass(part) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF payments FOR VALUES FROM (%L) TO (%L)', part,
                (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            EXECUTE format('ALTER TABLE %I REPLICA IDENTITY FULL', part);
            PERFORM paysched_grant_partition(part);
        END IF;
        d := d + 1;
    END LOOP;
END
$$`

func paymentID(i int) uuid.UUID { return uuid.UUID(md5.Sum([]byte(fmt.Sprintf("console-%d", i)))) }

// row i of the seed.
type seedRow struct {
	id                     uuid.UUID
	payer, payee, currency string
	amount                 int64
	due                    time.Time
	status                 payment.Status
	reason                 any
	outcome                payment.AttemptOutcome
}

// spread is the k-th of n even steps over d (in floating point: d times
// k would overflow).
func spread(d time.Duration, k, n int) time.Duration {
	return time.Duration(float64(d) * float64(k) / float64(n))
}

func rowOf(i, n int, now time.Time) seedRow {
	r := seedRow{id: paymentID(i), payer: fmt.Sprint("alice-", i%payers), payee: fmt.Sprint("shop-", (i*7919)%payees),
		amount: int64(100 + (i*31)%100000), currency: []string{"EUR", "EUR", "EUR", "USD", "USD", "GBP"}[i%6]}
	ahead := n / aheadShare
	if i < ahead {
		r.due = now.Add(spread(24*time.Hour, i, ahead)).Add(time.Minute)
		r.status = payment.Pending
		return r
	}
	past := n - ahead
	r.due = now.Add(-history).Add(spread(history, i-ahead, past))
	switch k := i % 1000; {
	case k < 4:
		r.status, r.outcome = payment.DeadLettered, payment.Retryable
		r.reason = string(payment.RetriesExhausted)
		if k == 3 {
			r.reason = string(payment.AmbiguousUnresolved)
		}
	case k < 24:
		r.status, r.outcome = payment.Failed, payment.Declined
	case k < 29:
		r.status, r.outcome = payment.Cancelled, payment.Declined
	default:
		r.status, r.outcome = payment.Completed, payment.Succeeded
	}
	return r
}

// Seed writes n payments with COPY: payment_index, payments and one
// attempt for each payment that has come due.
func Seed(ctx context.Context, db *pgxpool.Pool, n int, now time.Time, out io.Writer) error {
	// The month of history is older than the API may make partitions for
	// (a week): the bench, as the schema's owner, makes them as it does.
	if _, err := db.Exec(ctx, strings.Replace(backfillPartitionsSQL, "{from}", now.Add(-history-48*time.Hour).UTC().Format(time.DateOnly), 1)); err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	if _, err := store.EnsurePartitions(ctx, db, now.Add(-7*24*time.Hour), now.Add(72*time.Hour)); err != nil {
		return fmt.Errorf("partitions: %w", err)
	}
	type table struct {
		name string
		cols []string
		row  func(r seedRow) []any
		past bool
	}
	for _, t := range []table{
		{"payment_index", []string{"id", "payer", "payee", "due_time", "idempotency_key", "request_hash", "response", "created_at", "tenant",
			"currency", "amount_minor"},
			func(r seedRow) []any {
				return []any{r.id, r.payer, r.payee, r.due, "key-" + r.id.String(), []byte{1}, []byte{1}, r.due.Add(-time.Hour), r.payer,
					r.currency, r.amount}
			}, false},
		{"payments", []string{"id", "payer", "payee", "amount_minor", "currency", "due_time", "run_at", "status", "attempt",
			"dead_letter_reason", "gateway_ref", "created_at", "updated_at", "tenant"},
			func(r seedRow) []any {
				attempt, ref := int32(1), any("ch_"+r.id.String()[:12])
				if r.status == payment.Pending {
					attempt, ref = 0, nil
				}
				return []any{r.id, r.payer, r.payee, r.amount, r.currency, r.due, r.due, string(r.status), attempt, r.reason, ref,
					r.due.Add(-time.Hour), r.due.Add(time.Second), r.payer}
			}, false},
		{"payment_attempts", []string{"payment_id", "attempt", "started_at", "finished_at", "gateway_key", "outcome", "gateway_ref", "executor_id"},
			func(r seedRow) []any {
				start := r.due.Add(time.Duration(r.amount%400) * time.Millisecond)
				return []any{r.id, int32(1), start, start.Add(40 * time.Millisecond), r.id.String(), string(r.outcome), "ch_" + r.id.String()[:12], "bench"}
			}, true},
	} {
		t0 := time.Now()
		i, ahead := 0, n/aheadShare
		if t.past {
			i = ahead
		}
		copied, err := db.CopyFrom(ctx, pgx.Identifier{t.name}, t.cols, pgx.CopyFromFunc(func() ([]any, error) {
			if i >= n {
				return nil, nil
			}
			r := rowOf(i, n, now)
			i++
			return t.row(r), nil
		}))
		if err != nil {
			return fmt.Errorf("copy %s: %w", t.name, err)
		}
		fmt.Fprintf(out, "seeded %s: %d rows by COPY in %.1fs\n", t.name, copied, time.Since(t0).Seconds())
	}
	t0 := time.Now()
	for _, t := range []string{"payments", "payment_index", "payment_attempts"} {
		if _, err := db.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return fmt.Errorf("vacuum analyze %s: %w", t, err)
		}
	}
	fmt.Fprintf(out, "vacuum analyze in %.1fs\n", time.Since(t0).Seconds())
	return nil
}

// noActions: the bench only reads; its actions do nothing.
type noActions struct{}

// The console's Actions, as no-ops.

func (noActions) Redrive(context.Context, string, uuid.UUID, int32, string) error { return nil }
func (noActions) Resolve(context.Context, string, uuid.UUID, int32, string) error { return nil }
func (noActions) Cancel(context.Context, string, uuid.UUID, int32, string) error  { return nil }
func (noActions) Reconcile(context.Context, string, time.Time) error              { return nil }
func (noActions) Hold(context.Context, string, uuid.UUID, int32, string) error    { return nil }
func (noActions) Release(context.Context, string, uuid.UUID, int32, string) error { return nil }
func (noActions) CancelOpen(context.Context, string, uuid.UUID, payment.Status, int32, string) error {
	return nil
}
func (noActions) Reschedule(context.Context, string, uuid.UUID, int32, time.Time, string) error {
	return nil
}
func (noActions) RunNow(context.Context, string, uuid.UUID, int32, string) error { return nil }

// Page is one page's timings.
type Page struct {
	Name          string
	P50, P99, Max time.Duration
	Errors        int
}

// Run times each page `requests` times against the seeded database; the
// server time is the handler's (the console in process, no network).
func Run(ctx context.Context, db *pgxpool.Pool, n, requests int, now time.Time, out io.Writer) ([]Page, error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	c, err := console.New(ctx, console.Config{Dev: true, SessionKey: key}, db, noActions{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	// Twice: the first run of each plans its statements on a fresh
	// connection; the second is what every later one costs.
	first := c.Refresh(ctx)
	for name, d := range c.Refresh(ctx) {
		fmt.Fprintf(out, "background %-8s %6.0f ms, first %6.0f ms (every 10 s to 1 min, never per request)\n", name,
			float64(d.Microseconds())/1000, float64(first[name].Microseconds())/1000)
	}
	cookie, err := login(c)
	if err != nil {
		return nil, err
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	anyID := func() uuid.UUID { return paymentID(rng.IntN(n)) }
	dead := func() uuid.UUID { // a dead letter: i % 1000 < 4, past
		for {
			i := rng.IntN(n/1000)*1000 + rng.IntN(4)
			if i >= n/aheadShare && i < n {
				return paymentID(i)
			}
		}
	}
	day := func() (string, string) {
		from := now.Add(-time.Duration(rng.IntN(28*24)) * time.Hour)
		return from.UTC().Format("2006-01-02T15:04"), from.Add(24 * time.Hour).UTC().Format("2006-01-02T15:04")
	}
	pages := []struct {
		name string
		url  func() string
	}{
		{"overview", func() string { return "/console/" }},
		{"search by id", func() string { return "/console/payments?id=" + anyID().String() }},
		{"search by payer and key", func() string {
			i := rng.IntN(n)
			return fmt.Sprintf("/console/payments?payer=alice-%d&key=key-%s", i%payers, paymentID(i))
		}},
		{"search by payer", func() string { return fmt.Sprintf("/console/payments?payer=alice-%d", rng.IntN(payers)) }},
		{"search by payer, FAILED", func() string {
			return fmt.Sprintf("/console/payments?payer=alice-%d&status=FAILED", rng.IntN(payers))
		}},
		{"search by payee", func() string { return fmt.Sprintf("/console/payments?payee=shop-%d", rng.IntN(payees)) }},
		{"search a day", func() string { f, t := day(); return "/console/payments?from=" + f + "&to=" + t }},
		{"search a day, DEAD_LETTERED", func() string {
			f, t := day()
			return "/console/payments?status=DEAD_LETTERED&from=" + f + "&to=" + t
		}},
		{"a payment", func() string { return "/console/payments/" + anyID().String() }},
		{"a dead letter", func() string { return "/console/payments/" + dead().String() }},
		{"dead letters", func() string { return "/console/dead-letters" }},
		{"dead letters, AMBIGUOUS_UNRESOLVED", func() string { return "/console/dead-letters?reason=AMBIGUOUS_UNRESOLVED" }},
		{"search by tenant", func() string { return fmt.Sprintf("/console/payments?tenant=alice-%d", rng.IntN(payers)) }},
		{"search by gateway ref", func() string {
			return "/console/payments?ref=ch_" + paymentID(n/aheadShare + rng.IntN(n-n/aheadShare)).String()[:12]
		}},
		{"search a day, USD 500.00-900.00", func() string {
			f, t := day()
			return "/console/payments?currency=USD&min=50000&max=90000&from=" + f + "&to=" + t
		}},
		{"search a day, last error DECLINED", func() string {
			f, t := day()
			return "/console/payments?error=DECLINED&from=" + f + "&to=" + t
		}},
		{"export a day (first 10,000 rows)", func() string { f, t := day(); return "/console/payments.csv?from=" + f + "&to=" + t }},
		{"export the dead letters", func() string { return "/console/dead-letters.csv" }},
		{"requests", func() string { return "/console/requests" }},
		{"actions", func() string { return "/console/actions" }},
		{"tenants", func() string { return "/console/tenants" }},
		{"a tenant", func() string { return fmt.Sprintf("/console/tenants/alice-%d", rng.IntN(payers)) }},
		{"reconciliation", func() string { return "/console/reconciliation" }},
		{"gateway", func() string { return "/console/gateway" }},
	}
	var res []Page
	for _, p := range pages {
		var ds []time.Duration
		pg := Page{Name: p.name}
		for range requests {
			req := httptest.NewRequest(http.MethodGet, p.url(), nil)
			req.AddCookie(cookie)
			rec := httptest.NewRecorder()
			t0 := time.Now()
			c.ServeHTTP(rec, req)
			ds = append(ds, time.Since(t0))
			if rec.Code != http.StatusOK {
				pg.Errors++
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		pg.P50, pg.P99, pg.Max = ds[len(ds)/2], ds[(len(ds)*99+99)/100-1], ds[len(ds)-1]
		fmt.Fprintf(out, "page %-36s p50 %6.1f ms  p99 %6.1f ms  max %6.1f ms  errors %d\n", p.name,
			ms(pg.P50), ms(pg.P99), ms(pg.Max), pg.Errors)
		res = append(res, pg)
	}
	for _, q := range []url.Values{
		{"payer": {"alice-42"}, "status": {string(payment.Failed)}},
		{"payee": {"shop-4242"}},
		{"from": {now.Add(-72 * time.Hour).UTC().Format("2006-01-02T15:04")}, "to": {now.Add(-48 * time.Hour).UTC().Format("2006-01-02T15:04")},
			"status": {string(payment.DeadLettered)}},
	} {
		plan, err := console.ExplainSearch(ctx, db, q)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "\nplan of the search %s:\n  %s\n", q.Encode(), strings.Join(plan, "\n  "))
	}
	dayQ := url.Values{"from": {now.Add(-72 * time.Hour).UTC().Format("2006-01-02T15:04")}, "to": {now.Add(-48 * time.Hour).UTC().Format("2006-01-02T15:04")}}
	plan, err := console.ExplainExport(ctx, db, dayQ)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\nplan of a page of the export of %s:\n  %s\n", dayQ.Encode(), strings.Join(plan, "\n  "))
	return res, nil
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs in through the development form, as a browser would.
func login(c http.Handler) (*http.Cookie, error) {
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/login", nil))
	m := csrfField.FindStringSubmatch(rec.Body.String())
	if m == nil || len(rec.Result().Cookies()) == 0 {
		return nil, fmt.Errorf("login page: %d", rec.Code)
	}
	req := httptest.NewRequest(http.MethodPost, "/console/login/dev",
		strings.NewReader(url.Values{"csrf": {m[1]}, "name": {"bench"}, "role": {"admin"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(rec.Result().Cookies()[0])
	rec = httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || len(rec.Result().Cookies()) == 0 {
		return nil, fmt.Errorf("login: %d", rec.Code)
	}
	return rec.Result().Cookies()[0], nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
