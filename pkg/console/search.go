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

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// A search walks one index of payment_index in (due_time, id) order from
// its cursor, looks at most scanCap entries, and keeps those whose
// payment matches the status: so every search is bounded, whatever it
// asks. A page that is not full says how far it looked; "more" goes on.
const (
	pageSize = 50
	scanCap  = 2000
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
}

// Row is one payment in a list.
type Row struct {
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
var errorClasses = append(payment.Names(payment.FailReasons...), payment.Names(payment.DeadReasons...)...)

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
	if q.Currency != "" && !payment.Known(q.Currency) {
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

func search(ctx context.Context, db store.DB, q Query) (Result, error) {
	if q.Status == string(payment.DeadLettered) && q.ID == "" && q.Key == "" {
		return searchDead(ctx, db, q)
	}
	var rows pgx.Rows
	var err error
	switch {
	case q.ID != "":
		rows, err = db.Query(ctx, byIDSQL, q.id)
	case q.Key != "":
		rows, err = db.Query(ctx, byKeySQL, q.Payer, q.Key)
	case q.Payer != "":
		rows, err = db.Query(ctx, byPayerSQL, q.Payer, q.AfterAt, q.AfterID, q.To, scanCap)
	case q.Ref != "":
		rows, err = db.Query(ctx, byRefSQL, q.Ref, q.AfterAt, q.AfterID, q.To, scanCap)
	case q.Payee != "":
		rows, err = db.Query(ctx, byPayeeSQL, q.Payee, q.AfterAt, q.AfterID, q.To, scanCap)
	case q.Tenant != "":
		rows, err = db.Query(ctx, byTenantSQL, q.Tenant, q.AfterAt, q.AfterID, q.To, scanCap)
	default:
		rows, err = db.Query(ctx, byDueSQL, q.AfterAt, q.AfterID, q.To, scanCap)
	}
	if err != nil {
		return Result{}, fmt.Errorf("search: %w", err)
	}
	var ids []uuid.UUID
	var dues []time.Time
	for rows.Next() {
		var id uuid.UUID
		var due time.Time
		if err := rows.Scan(&id, &due); err != nil {
			rows.Close()
			return Result{}, fmt.Errorf("search: %w", err)
		}
		ids, dues = append(ids, id), append(dues, due)
	}
	if err := rows.Err(); err != nil {
		return Result{}, fmt.Errorf("search: %w", err)
	}
	res := Result{Looked: len(ids)}
	if len(ids) == 0 {
		return res, nil
	}
	// Every filter is checked on the payment, the walked one too (it
	// holds there trivially).
	f := q.filter()
	// The candidates' rows, a chunk at a time (growing) until the page is
	// full: a page that fills early reads few rows.
	for lo, n := 0, pageSize*2; lo < len(ids); lo, n = lo+n, n*2 {
		hi := min(len(ids), lo+n)
		rows, err := readRows(ctx, db, ids[lo:hi], dues[lo:hi], f)
		if err != nil {
			return Result{}, err
		}
		for _, r := range rows {
			if len(res.Rows) == pageSize {
				last := res.Rows[pageSize-1]
				res.Next = cursor(last.Due, last.ID)
				return res, nil
			}
			res.Rows = append(res.Rows, r)
		}
	}
	if len(ids) == scanCap && q.ID == "" && q.Key == "" {
		res.Next, res.Partial = cursor(dues[len(dues)-1], ids[len(ids)-1]), true
	}
	return res, nil
}

func scanRow(row pgx.Row) (Row, error) {
	var r Row
	err := row.Scan(&r.ID, &r.Payer, &r.Payee, &r.Amount, &r.Currency, &r.Due, &r.Status, &r.Attempt, &r.Reason, &r.Tenant)
	return r, err
}

// walkDead is a page of the dead letters kept by keep: the index's next
// page when nothing narrows it (narrowed false), else up to scanCap of
// them looked at, with a cursor to go on past them.
func walkDead(ctx context.Context, db store.DB, afterAt time.Time, afterID uuid.UUID, to time.Time, narrowed bool,
	keep func(Row) bool) (Result, error) {
	limit := pageSize + 1
	if narrowed {
		limit = scanCap
	}
	rows, err := db.Query(ctx, deadWalkSQL, afterAt, afterID, to, limit)
	if err != nil {
		return Result{}, fmt.Errorf("walk dead letters: %w", err)
	}
	defer rows.Close()
	var res Result
	var last Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return Result{}, fmt.Errorf("walk dead letters: %w", err)
		}
		res.Looked++
		last = r
		if !keep(r) {
			continue
		}
		if len(res.Rows) == pageSize {
			res.Next = cursor(res.Rows[pageSize-1].Due, res.Rows[pageSize-1].ID)
			return res, nil
		}
		res.Rows = append(res.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return Result{}, fmt.Errorf("walk dead letters: %w", err)
	}
	if res.Looked == scanCap {
		// Looked as far as one page may: the rest is further on.
		res.Next, res.Partial = cursor(last.Due, last.ID), true
	}
	return res, nil
}

// searchDead serves a search for dead letters through their own index: a
// status too rare for the walk of payment_index (0.4% of a day) to fill a
// page within its bound.
func searchDead(ctx context.Context, db store.DB, q Query) (Result, error) {
	f := q.filter()
	narrowed := q.Payer != "" || q.Payee != "" || f.narrows()
	return walkDead(ctx, db, q.AfterAt, q.AfterID, q.To, narrowed, func(r Row) bool {
		return (q.Payer == "" || r.Payer == q.Payer) && (q.Payee == "" || r.Payee == q.Payee) && f.keeps(r)
	})
}

// rowFilter narrows the rows a walk found: what rowsSQL checks on each.
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
func readRows(ctx context.Context, db store.DB, ids []uuid.UUID, dues []time.Time, f rowFilter) ([]Row, error) {
	rows, err := db.Query(ctx, rowsSQL, ids, dues, f.status, f.payee, f.currency, max(f.min, 1), f.max, f.errClass, f.tenant)
	if err != nil {
		return nil, fmt.Errorf("search rows: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("search rows: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("search rows: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Due.Before(out[j].Due) || out[i].Due.Equal(out[j].Due) && bytes.Compare(out[i].ID[:], out[j].ID[:]) < 0
	})
	return out, nil
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
func ExplainSearch(ctx context.Context, db store.DB, v url.Values) ([]string, error) {
	q, err := parseQuery(v, time.Now())
	if err != nil {
		return nil, err
	}
	sql, args := `EXPLAIN (ANALYZE, BUFFERS) `+byDueSQL, []any{q.AfterAt, q.AfterID, q.To, scanCap}
	switch {
	case q.ID != "":
		sql, args = `EXPLAIN (ANALYZE, BUFFERS) `+byIDSQL, []any{q.id}
	case q.Key != "":
		sql, args = `EXPLAIN (ANALYZE, BUFFERS) `+byKeySQL, []any{q.Payer, q.Key}
	case q.Payer != "":
		sql, args = `EXPLAIN (ANALYZE, BUFFERS) `+byPayerSQL, []any{q.Payer, q.AfterAt, q.AfterID, q.To, scanCap}
	case q.Ref != "":
		sql, args = `EXPLAIN (ANALYZE, BUFFERS) `+byRefSQL, []any{q.Ref, q.AfterAt, q.AfterID, q.To, scanCap}
	case q.Payee != "":
		sql, args = `EXPLAIN (ANALYZE, BUFFERS) `+byPayeeSQL, []any{q.Payee, q.AfterAt, q.AfterID, q.To, scanCap}
	case q.Tenant != "":
		sql, args = `EXPLAIN (ANALYZE, BUFFERS) `+byTenantSQL, []any{q.Tenant, q.AfterAt, q.AfterID, q.To, scanCap}
	}
	plan, err := explain(ctx, db, sql, args...)
	if err != nil {
		return nil, err
	}
	res, err := search(ctx, db, q)
	if err != nil || len(res.Rows) == 0 {
		return plan, err
	}
	var ids []uuid.UUID
	var dues []time.Time
	for _, r := range res.Rows {
		ids, dues = append(ids, r.ID), append(dues, r.Due)
	}
	f := q.filter()
	more, err := explain(ctx, db, `EXPLAIN (ANALYZE, BUFFERS) `+rowsSQL, ids, dues, f.status, "", f.currency, max(f.min, 1), f.max, f.errClass, "")
	return append(append(plan, "-- the candidates' rows:"), more...), err
}

func explain(ctx context.Context, db store.DB, sql string, args ...any) ([]string, error) {
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
