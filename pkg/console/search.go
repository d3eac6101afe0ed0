package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paysched/paysched/pkg/console/consoledb"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// A search walks one index of payment_index in (due_time, id) order from
// its cursor, looks at most scanCap entries, and keeps those whose
// payment matches the status: so every search is bounded, whatever it
// asks. A page that is not full says how far it looked; "more" goes on.
const (
	pageSize = 50
	// explainChunk is how many candidates' read ExplainSearch shows.
	explainChunk = 250
	scanCap      = 2000
	// maxRange is the widest due range one search may ask.
	maxRange = 366 * 24 * time.Hour
)

// Query is a payments search, as the form and the URL carry it.
type Query struct {
	ID     string
	Key    string
	Payer  string
	Payee  string
	Status string
	// Tenant and Ref each walk an index of their own; Currency, the amount
	// range (minor units, within Currency) and Error (a failure or
	// dead-letter reason) narrow whichever walk runs.
	Tenant    string
	Ref       string
	Currency  string
	MinAmount int64
	MaxAmount int64
	Error     string
	From      time.Time
	To        time.Time
	AfterAt   time.Time // cursor: the last (due_time, id) looked at
	AfterID   uuid.UUID

	id uuid.UUID
	// size is the rows of a page (0: pageSize); an export reads larger
	// pages (exportPage), each still within one walk's bound.
	size int
}

// pageRows is how many rows one page of q holds.
func (q Query) pageRows() int {
	if q.size > 0 {
		return q.size
	}
	return pageSize
}

// Row is one payment in a list. It names a struct type rather than
// defining one, so that the rows of every statement listing payments
// (SearchRows, WalkDeadLetters, WalkFailed, TenantDeadLetters: the same
// columns) convert to it (rowsOf).
type Row = struct {
	ID       uuid.UUID
	Payer    string
	Payee    string
	Amount   int64
	Currency string
	Due      time.Time
	Status   string
	Attempt  int32
	// Reason is why it was dead-lettered, or why it failed.
	Reason string
	Tenant string
}

// statuses are what a search filters on: every status, from pkg/payment.
var statuses = payment.Names(payment.Statuses...)

// errorClasses are the last-error classes a search filters on: why a
// payment failed, or why it was dead-lettered.
var errorClasses = append(failReasons[:len(failReasons):len(failReasons)], reasons...)

// failReasons are the failure reasons, a search's error classes that walk
// the failed payments.
var failReasons = payment.Names(payment.FailReasons...)

const dateForm = "2006-01-02T15:04"

// farFuture bounds a due range that has no end.
var farFuture = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// parseQuery reads and checks a search; its error is for the operator.
func parseQuery(v url.Values, now time.Time) (Query, error) {
	q := Query{ID: strings.TrimSpace(v.Get("id")), Key: strings.TrimSpace(v.Get("key")),
		Payer: strings.TrimSpace(v.Get("payer")), Payee: strings.TrimSpace(v.Get("payee")), Status: v.Get("status"),
		Tenant: strings.TrimSpace(v.Get("tenant")), Ref: strings.TrimSpace(v.Get("ref")),
		Currency: strings.ToUpper(strings.TrimSpace(v.Get("currency"))), Error: v.Get("error")}
	for name, s := range map[string]string{"payer": q.Payer, "payee": q.Payee, "idempotency key": q.Key, "tenant": q.Tenant,
		"gateway ref": q.Ref} {
		if !utf8.ValidString(s) || len(s) > 256 {
			return q, fmt.Errorf("the %s must be at most 256 characters of text", name)
		}
	}
	if q.Currency != "" && !payment.KnownCurrency(q.Currency) {
		return q, fmt.Errorf("%q is not an ISO 4217 currency code", clip(q.Currency, 10))
	}
	if q.Error != "" && !contains(errorClasses, q.Error) {
		return q, fmt.Errorf("%q is not an error class", clip(q.Error, 40))
	}
	for name, dst := range map[string]*int64{"min": &q.MinAmount, "max": &q.MaxAmount} {
		s := strings.TrimSpace(v.Get(name))
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return q, fmt.Errorf("the amount %s must be a whole number of minor units above 0", map[string]string{"min": "from", "max": "to"}[name])
		}
		*dst = n
	}
	if (q.MinAmount > 0 || q.MaxAmount > 0) && q.Currency == "" {
		return q, errors.New("an amount range is in one currency's minor units: give the currency too")
	}
	if q.MaxAmount > 0 && q.MinAmount > q.MaxAmount {
		return q, errors.New("the amount range ends before it starts")
	}
	if q.ID != "" {
		id, err := uuid.Parse(q.ID)
		if err != nil {
			return q, fmt.Errorf("%q is not a payment id (a UUID such as 0192f8e4-6b1c-7c3a-9d2e-4f5a6b7c8d9e)", clip(q.ID, 60))
		}
		q.id = id
	}
	if q.Key != "" && q.Payer == "" {
		return q, errors.New("an idempotency key belongs to a payer: give the payer too")
	}
	if q.Status != "" && !contains(statuses, q.Status) {
		return q, fmt.Errorf("%q is not a status", clip(q.Status, 40))
	}
	var err error
	if q.From, err = parseDate(v.Get("from")); err != nil {
		return q, fmt.Errorf("due from: %w", err)
	}
	if q.To, err = parseDate(v.Get("to")); err != nil {
		return q, fmt.Errorf("due to: %w", err)
	}
	if q.From.IsZero() && q.To.IsZero() && q.narrowers() == "" {
		// Nothing narrows it: the day around now.
		q.From, q.To = now.Add(-24*time.Hour).Truncate(time.Minute), now.Add(24*time.Hour).Truncate(time.Minute)
	}
	if q.From.IsZero() {
		q.From = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if q.To.IsZero() {
		q.To = farFuture
	}
	if !q.To.After(q.From) {
		return q, errors.New("the due range ends before it starts")
	}
	if q.narrowers() == "" && q.To.Sub(q.From) > maxRange {
		return q, errors.New("a due range without a payer, payee, tenant or gateway ref is at most a year")
	}
	if c := v.Get("after"); c != "" {
		at, id, ok := strings.Cut(c, "_")
		t, err1 := time.Parse(time.RFC3339Nano, at)
		u, err2 := uuid.Parse(id)
		if !ok || err1 != nil || err2 != nil {
			return q, errors.New("the page link is damaged: search again")
		}
		q.AfterAt, q.AfterID = t, u
	} else {
		q.AfterAt = q.From.Add(-time.Microsecond)
	}
	return q, nil
}

// narrowers is what walks an index of its own (id, payer, payee, tenant,
// ref), "" when the search walks the due range.
func (q Query) narrowers() string { return q.ID + q.Payer + q.Payee + q.Tenant + q.Ref }

func parseDate(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	for _, f := range []string{dateForm, time.RFC3339, "2006-01-02"} {
		if t, err := time.ParseInLocation(f, s, time.UTC); err == nil {
			if t.Year() < 2000 || t.Year() > 2200 {
				return time.Time{}, fmt.Errorf("%s is outside 2000-2200", s)
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a date (YYYY-MM-DDTHH:MM, UTC)", clip(s, 40))
}

// Values is the search as URL parameters (for links to the next page).
func (q Query) Values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"id": q.ID, "key": q.Key, "payer": q.Payer, "payee": q.Payee, "status": q.Status,
		"tenant": q.Tenant, "ref": q.Ref, "currency": q.Currency, "error": q.Error} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.MinAmount > 0 {
		v.Set("min", strconv.FormatInt(q.MinAmount, 10))
	}
	if q.MaxAmount > 0 {
		v.Set("max", strconv.FormatInt(q.MaxAmount, 10))
	}
	if q.From.Year() > 2000 {
		v.Set("from", q.From.UTC().Format(dateForm))
	}
	if q.To.Year() < 2200 {
		v.Set("to", q.To.UTC().Format(dateForm))
	}
	return v
}

// Result is a page of a search.
type Result struct {
	Rows []Row
	// Next continues the search ("" when it has looked at everything).
	Next string
	// Looked is how many payments it looked at; Partial: fewer matches
	// than a page in what it looked at, and more to look at.
	Looked  int
	Partial bool
}

// walkOf is the walk a search takes: one index range of payment_index
// (walk), or the partial index of a rare status at rest (rest, with walk
// nil).
func walkOf(q Query) (walk func(context.Context, *consoledb.Queries) ([]candidate, error), rest atRest) {
	if q.ID == "" && q.Key == "" {
		switch {
		case q.Status == string(payment.DeadLettered) || (q.Status == "" && contains(reasons, q.Error)):
			return nil, deadLetters
		case q.Payer+q.Payee+q.Tenant+q.Ref == "" &&
			(q.Status == string(payment.Failed) || (q.Status == "" && contains(failReasons, q.Error))):
			// Nothing narrower to walk: the failed payments' own index.
			return nil, failedPayments
		}
	}
	// The walks' cursor, end and bound.
	after, to, limit := q.AfterAt, q.To, int32(scanCap)
	switch {
	case q.ID != "":
		return func(ctx context.Context, db *consoledb.Queries) ([]candidate, error) {
			return candidatesOf(db.WalkByID(ctx, q.id))
		}, notAtRest
	case q.Key != "":
		return func(ctx context.Context, db *consoledb.Queries) ([]candidate, error) {
			return candidatesOf(db.WalkByKey(ctx, consoledb.WalkByKeyParams{Payer: q.Payer, IdempotencyKey: &q.Key}))
		}, notAtRest
	case q.Payer != "":
		return func(ctx context.Context, db *consoledb.Queries) ([]candidate, error) {
			return candidatesOf(db.WalkByPayer(ctx, consoledb.WalkByPayerParams{Payer: q.Payer, AfterDue: after,
				AfterID: q.AfterID, DueBefore: to, Max: limit}))
		}, notAtRest
	case q.Ref != "":
		return func(ctx context.Context, db *consoledb.Queries) ([]candidate, error) {
			return candidatesOf(db.WalkByRef(ctx, consoledb.WalkByRefParams{Ref: &q.Ref, AfterDue: after,
				AfterID: q.AfterID, DueBefore: to, Max: limit}))
		}, notAtRest
	case q.Payee != "":
		return func(ctx context.Context, db *consoledb.Queries) ([]candidate, error) {
			return candidatesOf(db.WalkByPayee(ctx, consoledb.WalkByPayeeParams{Payee: &q.Payee, AfterDue: after,
				AfterID: q.AfterID, DueBefore: to, Max: limit}))
		}, notAtRest
	case q.Tenant != "":
		return func(ctx context.Context, db *consoledb.Queries) ([]candidate, error) {
			return candidatesOf(db.WalkByTenant(ctx, consoledb.WalkByTenantParams{Tenant: &q.Tenant, AfterDue: after,
				AfterID: q.AfterID, DueBefore: to, Max: limit}))
		}, notAtRest
	case q.Currency != "":
		f := q.filter()
		return func(ctx context.Context, db *consoledb.Queries) ([]candidate, error) {
			rs, err := db.WalkByCurrency(ctx, consoledb.WalkByCurrencyParams{Currency: &q.Currency, AfterDue: after,
				AfterID: q.AfterID, DueBefore: to, Max: limit, MinAmount: &f.min, MaxAmount: &f.max})
			return keptOf(rs, err)
		}, notAtRest
	}
	return func(ctx context.Context, db *consoledb.Queries) ([]candidate, error) {
		return candidatesOf(db.WalkByDue(ctx, consoledb.WalkByDueParams{AfterDue: after, AfterID: q.AfterID,
			DueBefore: to, Max: limit}))
	}, notAtRest
}

// keptOf is what the walk of a currency returned: an entry whose amount
// is NULL (kept NULL) is an error, as it was when kept was scanned into a
// bool.
func keptOf(rs []consoledb.WalkByCurrencyRow, err error) ([]candidate, error) {
	if err != nil {
		return nil, err
	}
	out := make([]candidate, 0, len(rs))
	for _, r := range rs {
		kept, ok := r.Kept.(bool)
		if !ok {
			return nil, fmt.Errorf("payment %s: no amount in payment_index", r.ID)
		}
		out = append(out, candidate{ID: r.ID, DueTime: r.DueTime, Kept: kept})
	}
	return out, nil
}

// search is one page of q: its walk's candidates, read and filtered a
// chunk at a time.
func search(ctx context.Context, db pgdb.DB, q Query) (Result, error) {
	walk, rest := walkOf(q)
	if rest != notAtRest {
		return searchAtRest(ctx, db, rest, q)
	}
	cands, err := walk(ctx, consoledb.New(db))
	if err != nil {
		return Result{}, fmt.Errorf("search: %w", err)
	}
	var ids []uuid.UUID
	var dues []time.Time
	looked := 0
	var lastAt time.Time // the last entry looked at, kept or not
	var lastID uuid.UUID
	for _, c := range cands {
		looked, lastAt, lastID = looked+1, c.DueTime, c.ID
		if c.Kept {
			ids, dues = append(ids, c.ID), append(dues, c.DueTime)
		}
	}
	res := Result{Looked: looked}
	partial := looked == scanCap && q.ID == "" && q.Key == ""
	if len(ids) == 0 {
		if partial {
			res.Next, res.Partial = cursor(lastAt, lastID), true
		}
		return res, nil
	}
	// Every filter is checked on the payment, the walked one too (it
	// holds there trivially).
	f := q.filter()
	// The candidates' rows, a chunk at a time (growing) until the page is
	// full: a page that fills early reads few rows. Unfiltered, every
	// candidate is a row, and the first chunk is the page and one more.
	size := q.pageRows()
	first := size * 2
	if f.status == "" && f.payee == "" && !f.narrows() {
		first = size + 1
	}
	for lo, n := 0, first; lo < len(ids); lo, n = lo+n, n*2 {
		hi := min(len(ids), lo+n)
		rows, err := readRows(ctx, db, ids[lo:hi], dues[lo:hi], f)
		if err != nil {
			return Result{}, err
		}
		for _, r := range rows {
			if len(res.Rows) == size {
				last := res.Rows[size-1]
				res.Next = cursor(last.Due, last.ID)
				return res, nil
			}
			res.Rows = append(res.Rows, r)
		}
	}
	if partial {
		res.Next, res.Partial = cursor(lastAt, lastID), true
	}
	return res, nil
}

// walkDead is a page of the dead letters kept by keep: the index's next
// page when nothing narrows it (narrowed false), else up to scanCap of
// them looked at, with a cursor to go on past them.
func walkDead(ctx context.Context, db pgdb.DB, afterAt time.Time, afterID uuid.UUID, to time.Time, narrowed bool,
	keep func(Row) bool) (Result, error) {
	return walkAtRest(ctx, db, deadLetters, pageSize, afterAt, afterID, to, narrowed, keep)
}

// walkAtRest is walkDead through the partial index of rest (deadLetters
// or failedPayments), size rows a page.
func walkAtRest(ctx context.Context, db pgdb.DB, rest atRest, size int, afterAt time.Time, afterID uuid.UUID, to time.Time,
	narrowed bool, keep func(Row) bool) (Result, error) {
	limit := size + 1
	if narrowed {
		limit = scanCap
	}
	rows, err := rest.walk(ctx, consoledb.New(db), afterAt, afterID, to, limit)
	if err != nil {
		return Result{}, fmt.Errorf("walk payments at rest: %w", err)
	}
	var res Result
	var last Row
	for _, r := range rows {
		res.Looked++
		last = r
		if !keep(r) {
			continue
		}
		if len(res.Rows) == size {
			res.Next = cursor(res.Rows[size-1].Due, res.Rows[size-1].ID)
			return res, nil
		}
		res.Rows = append(res.Rows, r)
	}
	if res.Looked == scanCap {
		// Looked as far as one page may: the rest is further on.
		res.Next, res.Partial = cursor(last.Due, last.ID), true
	}
	return res, nil
}

// searchAtRest serves a search for dead letters or failed payments
// through their own partial index (rest, deadLetters or failedPayments):
// a status too rare for the walk of payment_index (0.4% and 2% of a day)
// to fill a page within its bound.
func searchAtRest(ctx context.Context, db pgdb.DB, rest atRest, q Query) (Result, error) {
	f := q.filter()
	narrowed := q.Payer != "" || q.Payee != "" || f.narrows()
	return walkAtRest(ctx, db, rest, q.pageRows(), q.AfterAt, q.AfterID, q.To, narrowed, func(r Row) bool {
		return (q.Payer == "" || r.Payer == q.Payer) && (q.Payee == "" || r.Payee == q.Payee) && f.keeps(r)
	})
}

// rowFilter narrows the rows a walk found: what SearchRows checks on each.
type rowFilter struct {
	status, payee, currency, errClass, tenant string
	min, max                                  int64
}

// filter is q's filter of the rows its walk finds.
func (q Query) filter() rowFilter {
	f := rowFilter{status: q.Status, payee: q.Payee, currency: q.Currency, errClass: q.Error, tenant: q.Tenant,
		min: q.MinAmount, max: q.MaxAmount}
	if f.max == 0 {
		f.max = 1<<63 - 1
	}
	return f
}

// narrows says whether f may drop rows of the dead-letter walk (whose
// status and payer or payee are checked apart).
func (f rowFilter) narrows() bool {
	return f.currency != "" || f.errClass != "" || f.tenant != "" || f.min > 0 || f.max < 1<<63-1
}

// keeps is f on a dead letter already read.
func (f rowFilter) keeps(r Row) bool {
	return (f.currency == "" || r.Currency == f.currency) && r.Amount >= f.min && r.Amount <= f.max &&
		(f.errClass == "" || r.Reason == f.errClass) && (f.tenant == "" || r.Tenant == f.tenant)
}

// readRows reads the candidates' payments that match, in (due, id) order.
func readRows(ctx context.Context, db pgdb.DB, ids []uuid.UUID, dues []time.Time, f rowFilter) ([]Row, error) {
	rs, err := consoledb.New(db).SearchRows(ctx, rowsParams(ids, dues, f))
	if err != nil {
		return nil, fmt.Errorf("search rows: %w", err)
	}
	out := rowsOf(rs)
	sort.Slice(out, func(i, j int) bool {
		return out[i].Due.Before(out[j].Due) || out[i].Due.Equal(out[j].Due) && bytes.Compare(out[i].ID[:], out[j].ID[:]) < 0
	})
	return out, nil
}

// rowsParams is the read of the candidates ids (due at dues) that f keeps.
func rowsParams(ids []uuid.UUID, dues []time.Time, f rowFilter) consoledb.SearchRowsParams {
	lo, hi := span(dues)
	return consoledb.SearchRowsParams{Ids: ids, Dues: dues, Lo: lo, Hi: hi, Status: f.status, Payee: f.payee,
		Currency: f.currency, MinAmount: max(f.min, 1), MaxAmount: f.max, ErrClass: f.errClass, Tenant: f.tenant}
}

// span is the earliest and the latest of dues (zero times if none): the
// range that prunes a read by (id, due) to the dues' partitions.
func span(dues []time.Time) (lo, hi time.Time) {
	for i, d := range dues {
		if i == 0 || d.Before(lo) {
			lo = d
		}
		if i == 0 || d.After(hi) {
			hi = d
		}
	}
	return lo, hi
}

func cursor(t time.Time, id uuid.UUID) string {
	return t.UTC().Format(time.RFC3339Nano) + "_" + id.String()
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// ExplainSearch is the plan, with its timings (EXPLAIN ANALYZE), of the
// index walk a search of v runs and of the read of its first candidates:
// make bench-console prints them at scale.
func ExplainSearch(ctx context.Context, db pgdb.DB, v url.Values) ([]string, error) {
	q, err := parseQuery(v, time.Now())
	if err != nil {
		return nil, err
	}
	return explainSearch(ctx, db, q)
}

// ExplainExport is ExplainSearch for a page of the export of v.
func ExplainExport(ctx context.Context, db pgdb.DB, v url.Values) ([]string, error) {
	q, err := parseQuery(v, time.Now())
	if err != nil {
		return nil, err
	}
	q.size = exportPage
	return explainSearch(ctx, db, q)
}

func explainSearch(ctx context.Context, db pgdb.DB, q Query) ([]string, error) {
	walk, rest := walkOf(q)
	sql, args := sentBy(func(s *consoledb.Queries) error {
		if rest != notAtRest {
			_, err := rest.walk(ctx, s, q.AfterAt, q.AfterID, q.To, scanCap)
			return err
		}
		_, err := walk(ctx, s)
		return err
	})
	plan, err := explain(ctx, db, `EXPLAIN (ANALYZE, BUFFERS) `+sql, args...)
	if err != nil {
		return nil, err
	}
	res, err := search(ctx, db, q)
	if err != nil || len(res.Rows) == 0 {
		return plan, err
	}
	var ids []uuid.UUID
	var dues []time.Time
	for _, r := range res.Rows[:min(len(res.Rows), explainChunk)] {
		ids, dues = append(ids, r.ID), append(dues, r.Due)
	}
	// The read as a search with no payee or tenant makes it.
	f := q.filter()
	f.payee, f.tenant = "", ""
	sql, args = sentBy(func(s *consoledb.Queries) error {
		_, err := s.SearchRows(ctx, rowsParams(ids, dues, f))
		return err
	})
	more, err := explain(ctx, db, `EXPLAIN (ANALYZE, BUFFERS) `+sql, args...)
	return append(append(plan, "-- the candidates' rows:"), more...), err
}

func explain(ctx context.Context, db pgdb.DB, sql string, args ...any) ([]string, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, fmt.Errorf("explain: %w", err)
		}
		out = append(out, line)
	}
	return out, rows.Err()
}

// errSent stops a generated method at sentBy's recorder.
var errSent = errors.New("console: statement recorded, not sent")

// recorder is a consoledb.DBTX that keeps the last statement given it,
// with its arguments, and sends nothing.
type recorder struct {
	sql  string
	args []any
}

func (r *recorder) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.sql, r.args = sql, args
	return pgconn.CommandTag{}, errSent
}

func (r *recorder) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.sql, r.args = sql, args
	return nil, errSent
}

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	r.sql, r.args = sql, args
	return sentRow{}
}

// sentRow is recorder's row: nothing to scan.
type sentRow struct{}

func (sentRow) Scan(...any) error { return errSent }

// sentBy is the statement, with its arguments, that call sends through
// the consoledb.Queries it is given (which send nothing): a named
// statement's text and arguments as its generated method sends them, for
// EXPLAIN.
func sentBy(call func(*consoledb.Queries) error) (string, []any) {
	var r recorder
	_ = call(consoledb.New(&r))
	return r.sql, r.args
}
