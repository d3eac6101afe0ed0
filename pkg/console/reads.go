package console

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/console/consoledb"
	"github.com/paysched/paysched/pkg/payment"
)

// The console's reads: every statement its pages run to show the
// schedule, the engine and the books is named in package consoledb
// (reads.sql, and search.sql for the searches), and this file turns what
// they return into the pages' types. Each is bounded (a LIMIT, an index
// range or a cap) because a page must answer within pageTimeout at any
// size; TestSearchPlansAreIndexedAndBounded prints the plans of the
// searches. The console's own tables (requests, sessions) are read beside
// the statements that write them, in packages approval and login.

// cappedCount counts one open status's rows through its partial index
// (sweep, lease, dead letters), stopping at max: one named statement per
// status, the status a literal in its text (a partial index needs it when
// the plan is made, a parameter would not do).
var cappedCount = map[payment.Status]func(*consoledb.Queries, context.Context, int32) (int64, error){
	payment.Pending:      (*consoledb.Queries).CountPendingCapped,
	payment.Processing:   (*consoledb.Queries).CountProcessingCapped,
	payment.DeadLettered: (*consoledb.Queries).CountDeadLetteredCapped,
}

// rowsOf is the pages' rows of what a statement listing payments returned.
func rowsOf[R ~Row](rs []R) []Row {
	if len(rs) == 0 {
		return nil // as a list read row by row was
	}
	out := make([]Row, 0, len(rs))
	for _, r := range rs {
		out = append(out, Row(r))
	}
	return out
}

// candidate is one entry a search's walk looked at (a row of a WalkBy
// statement): its payment, and whether the walk keeps it.
type candidate = struct {
	ID      uuid.UUID
	DueTime time.Time
	Kept    bool
}

// candidatesOf is what a candidate walk returned.
func candidatesOf[R ~candidate](rs []R, err error) ([]candidate, error) {
	out := make([]candidate, 0, len(rs))
	for _, r := range rs {
		out = append(out, candidate(r))
	}
	return out, err
}

// atRest is a status at rest that a list walks through its own partial
// index on (due_time, id), (version 22): too rare for the walk of
// payment_index to fill a page within its bound.
type atRest int

const (
	notAtRest atRest = iota
	deadLetters
	failedPayments
)

// walk is at most limit of a's payments after (afterAt, afterID) and due
// before to, in (due_time, id) order.
func (a atRest) walk(ctx context.Context, q *consoledb.Queries, afterAt time.Time, afterID uuid.UUID, to time.Time,
	limit int) ([]Row, error) {
	p := consoledb.WalkDeadLettersParams{AfterDue: afterAt, AfterID: afterID, DueBefore: to, Max: int32(limit)}
	switch a {
	case deadLetters:
		rs, err := q.WalkDeadLetters(ctx, p)
		return rowsOf(rs), err
	case failedPayments:
		rs, err := q.WalkFailed(ctx, consoledb.WalkFailedParams(p))
		return rowsOf(rs), err
	}
	return nil, fmt.Errorf("no walk of the payments at rest %d", a)
}
