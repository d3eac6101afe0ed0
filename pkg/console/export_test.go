package console

import (
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/console/login"
)

// TestCSVExportIsBounded: an export of a search and of the dead letters
// streams every match up to maxExport rows and stops there, however many
// more match; a payer's text that a spreadsheet would run as a formula is
// quoted.
func TestCSVExportIsBounded(t *testing.T) {
	h := newHarness(t, Config{})
	defer func(n int) { maxExport = n }(maxExport)
	maxExport = 130 // more than two pages of a search, fewer than what matches
	due := time.Now().Add(-time.Minute)
	ids := h.schedule(200, due, 700)
	h.deadLetter(ids[:150])
	if _, err := h.db.Exec(t.Context(), `UPDATE payments SET payer = '=HYPERLINK("x")' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	viewer := h.as("vic", login.Viewer)
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/console/payments.csv?payer=alice&from=" + due.Add(-time.Hour).UTC().Format(dateForm), 130},
		{"/console/dead-letters.csv", 130},
		{"/console/payments.csv?payer=alice&status=PENDING&from=" + due.Add(-time.Hour).UTC().Format(dateForm), 50},
	} {
		rec := h.get(viewer, tc.path)
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/csv") {
			t.Fatalf("%s: %d %s", tc.path, rec.Code, rec.Body.String())
		}
		recs, err := csv.NewReader(strings.NewReader(rec.Body.String())).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if len(recs)-1 != tc.want || recs[0][0] != "payment_id" {
			t.Fatalf("%s: %d rows (header %v), want %d", tc.path, len(recs)-1, recs[0], tc.want)
		}
		for _, r := range recs[1:] {
			if strings.HasPrefix(r[2], "=") {
				t.Fatalf("%s: a formula left as is: %v", tc.path, r)
			}
		}
	}
	if rec := h.get(viewer, "/console/dead-letters.csv?reason=NOPE"); rec.Code != 400 {
		t.Fatalf("a bad reason: %d", rec.Code)
	}
}
