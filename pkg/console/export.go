package console

// CSV exports: a search, the dead letters, a reconciliation run's
// findings. Each is streamed as it is read (the first rows leave before
// the last are read) and capped at maxExport rows; each read under it is
// one of the bounded reads the pages make, so an export costs at most
// maxExport / pageSize of them (and the scans they bound).

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/console/consoledb"
)

// maxExport is the most rows one export holds: narrow the search for
// more. A variable for the tests.
var maxExport = 10_000

// exportPage is the rows of one page of an export: a walk's bound
// (scanCap), so that an unfiltered export of maxExport rows is five walks
// and five reads by key, not two hundred of each. At 5M the statements
// of a page take a few ms (EXPLAIN ANALYZE in make bench-console); the
// export's time is per statement, so fewer is faster.
const exportPage = scanCap

// maxExportLooks bounds the bounded reads of one export: a search whose
// matches are sparse stops after looking at this many pages of candidates.
const maxExportLooks = 500

// csvCell keeps a spreadsheet from reading a cell as a formula (CSV
// injection): a payer or payee is a client's text.
func csvCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// startCSV writes the headers of a CSV download named name.
func startCSV(w http.ResponseWriter, name string) *csv.Writer {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
	w.Header().Set("X-Export-Limit", strconv.Itoa(maxExport))
	w.WriteHeader(http.StatusOK)
	return csv.NewWriter(w)
}

var rowHeader = []string{"payment_id", "due_time", "payer", "payee", "amount_minor", "currency", "status", "attempt", "reason", "tenant"}

func rowRecord(r Row) []string {
	return []string{r.ID.String(), r.Due.UTC().Format(time.RFC3339Nano), csvCell(r.Payer), csvCell(r.Payee),
		strconv.FormatInt(r.Amount, 10), r.Currency, r.Status, strconv.Itoa(int(r.Attempt)), r.Reason, csvCell(r.Tenant)}
}

// flush flushes the CSV and the response every page, so the download
// streams.
func flush(cw *csv.Writer, w http.ResponseWriter) {
	cw.Flush()
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// exportPayments streams the payments a search matches, up to maxExport.
func (c *Console) exportPayments(w http.ResponseWriter, r *http.Request, v *view) {
	q, err := parseQuery(r.URL.Query(), c.now())
	if err != nil {
		c.fail(w, r, v, http.StatusBadRequest, err.Error())
		return
	}
	q.size = exportPage
	ctx := r.Context()
	// The first page before any byte: a mistake still gets a page.
	res, err := search(ctx, c.db, q)
	if err != nil {
		c.dbFail(w, r, v, "search", err)
		return
	}
	c.streamRows(w, "payments", res, func(at time.Time, id uuid.UUID) (Result, error) {
		q.AfterAt, q.AfterID = at, id
		return search(ctx, c.db, q)
	})
}

// streamRows writes first and the pages next reads after it, as CSV,
// flushing each page, until maxExport rows, maxExportLooks pages, the
// last page or a failure (logged: the download is already under way).
// The next page is read while this one is written, so the database and
// the client's download overlap.
func (c *Console) streamRows(w http.ResponseWriter, name string, first Result, next func(time.Time, uuid.UUID) (Result, error)) {
	type page struct {
		res Result
		err error
	}
	cw := startCSV(w, name)
	_ = cw.Write(rowHeader)
	n := 0
	res := first
	for looks := 1; ; looks++ {
		var ahead chan page
		if res.Next != "" && looks < maxExportLooks && n+len(res.Rows) < maxExport {
			ahead = make(chan page, 1)
			at, id, _ := splitCursor(res.Next)
			go func() {
				r, err := next(at, id)
				ahead <- page{r, err}
			}()
		}
		for _, row := range res.Rows {
			if n == maxExport {
				break
			}
			_ = cw.Write(rowRecord(row))
			n++
		}
		flush(cw, w)
		if ahead == nil {
			return
		}
		p := <-ahead
		if p.err != nil {
			c.log.Warn("console: export "+name, "err", p.err)
			return
		}
		res = p.res
	}
}

// splitCursor reads a cursor (see cursor).
func splitCursor(s string) (time.Time, uuid.UUID, bool) {
	at, id, ok := strings.Cut(s, "_")
	t, e1 := time.Parse(time.RFC3339Nano, at)
	u, e2 := uuid.Parse(id)
	return t, u, ok && e1 == nil && e2 == nil
}

// exportDead streams the dead letters (of a reason), oldest due first, up
// to maxExport.
func (c *Console) exportDead(w http.ResponseWriter, r *http.Request, v *view) {
	reason := r.URL.Query().Get("reason")
	if reason != "" && !contains(reasons, reason) {
		c.fail(w, r, v, http.StatusBadRequest, fmt.Sprintf("%q is not a dead-letter reason.", clip(reason, 40)))
		return
	}
	ctx := r.Context()
	keep := func(x Row) bool { return reason == "" || x.Reason == reason }
	to := c.now().Add(time.Microsecond)
	res, err := walkAtRest(ctx, c.db, deadLetters, exportPage, time.Unix(0, 0).UTC(), uuid.Nil, to, reason != "", keep)
	if err != nil {
		c.dbFail(w, r, v, "list dead letters", err)
		return
	}
	c.streamRows(w, "dead-letters", res, func(at time.Time, id uuid.UUID) (Result, error) {
		return walkAtRest(ctx, c.db, deadLetters, exportPage, at, id, to, reason != "", keep)
	})
}

// exportRecon streams one reconciliation run's findings (mismatches and
// repairs), up to maxExport, through the run's index.
func (c *Console) exportRecon(w http.ResponseWriter, r *http.Request, v *view) {
	run, ok := c.pathNumber(w, r, v, "run", "That is not a run number.")
	if !ok {
		return
	}
	ctx := r.Context()
	items, err := consoledb.New(c.db).ReconItems(ctx, consoledb.ReconItemsParams{RunID: run, Max: int32(maxExport)})
	if err != nil {
		c.dbFail(w, r, v, "run items", err)
		return
	}
	cw := startCSV(w, fmt.Sprintf("reconciliation-run-%d", run))
	_ = cw.Write([]string{"kind", "severity", "payment_id", "reference", "charge_ids", "detail"})
	for _, it := range items {
		if err := cw.Write([]string{it.Kind, it.Severity, it.PaymentID, csvCell(it.Reference), strings.Join(it.ChargeIds, " "), csvCell(it.Detail)}); err != nil {
			c.log.Warn("console: export run", "run", run, "err", err)
			break
		}
	}
	flush(cw, w)
}
