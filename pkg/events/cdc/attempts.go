package cdc

import (
	"context"
	"fmt"
	"strings"

	"github.com/paysched/paysched/pkg/events/cdc/cdcdb"
	"github.com/paysched/paysched/pkg/events/envelope"
)

// Attempts announced by their payment's change (schema 15). The executor
// writes a payment's outcome and its attempt row in one statement; the
// payment's row then carries the attempt (its attempt_* columns), the
// attempt row is marked announced, and the publication leaves announced
// rows out (a row filter). The connector derives the attempt's change
// event from the payment's: the same envelope, key, topic and source
// (LSN, transaction, commit time) as if the row had been published, one
// change fewer for the walsender to decode and send and for the connector
// to read. Attempt rows written any other way (the reaper's ABANDONED
// rows, the outcome of a fenced attempt, the replacement of an ABANDONED
// row) are published as themselves.

// attemptsFilter is the publication's row filter on payment_attempts, as
// pg_publication_tables shows it.
const attemptsFilter = "(NOT announced)"

// announceFrom says where each column of payment_attempts comes from in
// the announcing payments row: a payments column of the same type, or a
// value of its own (gateway_key: the payment id as text; announced: true).
var announceFrom = map[string]string{
	"payment_id":  "id",
	"attempt":     "attempt",
	"started_at":  "attempt_started_at",
	"finished_at": "updated_at",
	"gateway_key": "", // id, as text
	"outcome":     "attempt_outcome",
	"gateway_ref": "attempt_ref",
	"error":       "attempt_error",
	"executor_id": "attempt_executor",
	"announced":   "", // true
}

// announcer derives attempt change events from payments changes.
type announcer struct {
	rel *envelope.Relation // payment_attempts, from the catalog
	// from[i] is the index, in the payments relation, of the column
	// attempt column i comes from (-1: its own value, see announceFrom);
	// outcome is attempt_outcome's index, id the payment id's. Set for the
	// payments relation last announced (payments).
	from        []int
	outcome, id int
	payments    *envelope.Relation
	// scratch
	vals []envelope.Datum
	key  []byte
}

// loadAnnouncer reads payment_attempts' columns from the catalog: the
// relation whose changes are derived (pgoutput never describes it while
// only its unannounced rows are published). Every column must be one
// announceFrom knows, or the connector refuses to stream: a derived event
// must hold the row as it is.
func loadAnnouncer(ctx context.Context, db cdcdb.DBTX, src envelope.Source) (*announcer, error) {
	cols, err := cdcdb.New(db).AttemptColumns(ctx)
	if err != nil {
		return nil, fmt.Errorf("read payment_attempts' columns: %w", err)
	}
	rel := &envelope.Relation{Schema: "public", Table: "payment_attempts"}
	for _, col := range cols {
		rel.Columns = append(rel.Columns, envelope.Column{Name: col.Name, OID: uint32(col.TypeOid), Key: col.Key})
	}
	var unknown []string
	for _, col := range rel.Columns {
		if _, ok := announceFrom[col.Name]; !ok {
			unknown = append(unknown, col.Name)
		}
	}
	if len(unknown) > 0 || len(rel.Columns) != len(announceFrom) {
		return nil, fmt.Errorf("payment_attempts has columns %v the connector cannot derive from a payment's change (it knows %d): upgrade cdc, or run it with --announced-attempts=false",
			unknown, len(announceFrom))
	}
	rel.Prepare(src)
	return &announcer{rel: rel}, nil
}

// bind maps the attempt columns onto a payments relation's columns (a
// Relation message: at the start, and after a schema change), checking
// that each comes from a column of its own type.
func (a *announcer) bind(p *envelope.Relation) error {
	idx := make(map[string]int, len(p.Columns))
	for i, c := range p.Columns {
		idx[c.Name] = i
	}
	need := func(name string) (int, error) {
		i, ok := idx[name]
		if !ok {
			return 0, fmt.Errorf("payments has no column %s to announce attempts with: run migrate (schema 15)", name)
		}
		return i, nil
	}
	var err error
	if a.outcome, err = need("attempt_outcome"); err != nil {
		return err
	}
	if a.id, err = need("id"); err != nil {
		return err
	}
	a.from = make([]int, len(a.rel.Columns))
	for i, col := range a.rel.Columns {
		src := announceFrom[col.Name]
		if src == "" {
			a.from[i] = -1
			continue
		}
		j, err := need(src)
		if err != nil {
			return err
		}
		if p.Columns[j].OID != col.OID {
			return fmt.Errorf("payment_attempts.%s (type %d) cannot be announced by payments.%s (type %d)", col.Name, col.OID, src, p.Columns[j].OID)
		}
		a.from[i] = j
	}
	a.payments = p
	return nil
}

// derive returns the attempt row a payments change announces (after is
// its new row), or nil when it announces none. The row's values alias
// after's and the announcer's scratch: use them before the next call.
func (a *announcer) derive(r *envelope.Relation, after []envelope.Datum) []envelope.Datum {
	if r != a.payments || len(after) != len(r.Columns) || after[a.outcome].Kind == 'n' {
		return nil
	}
	a.vals = a.vals[:0]
	for i, col := range a.rel.Columns {
		switch j := a.from[i]; {
		case j >= 0:
			a.vals = append(a.vals, after[j])
		case col.Name == "announced":
			a.vals = append(a.vals, envelope.Datum{Kind: 't', Data: []byte("t")})
		default: // gateway_key: the payment id, as text
			a.key = uuidText(a.key[:0], after[a.id])
			a.vals = append(a.vals, envelope.Datum{Kind: 't', Data: a.key})
		}
	}
	return a.vals
}

// uuidText is the canonical text of a uuid datum, in either form.
func uuidText(b []byte, d envelope.Datum) []byte {
	if d.Kind != 'b' || len(d.Data) != 16 {
		return append(b, d.Data...)
	}
	const hex = "0123456789abcdef"
	for i, x := range d.Data {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[x>>4], hex[x&0xf])
	}
	return b
}

// ensureAttemptsFilter makes the publication leave announced attempt rows
// out (or, with announcing off, publish every one), if it does not yet:
// the migrations set it on the publication they make; a publication cdc
// made itself, it mends. It fails, naming the fix, when it cannot.
func (c *Connector) ensureAttemptsFilter(ctx context.Context) error {
	has, err := cdcdb.New(c.db).AttemptsRowFilter(ctx, c.cfg.Publication)
	if err != nil {
		return fmt.Errorf("check the publication's filter on payment_attempts: %w", err)
	}
	want := !c.cfg.PublishAttempts
	if (has != nil && strings.TrimSpace(*has) == attemptsFilter) == want {
		return nil
	}
	filter := ""
	if want {
		filter = attemptsFilter
	}
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("publication filter: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// Both statements' errors count: the second's is not shadowed.
	_, err = tx.Exec(ctx, dropTableSQL(c.cfg.Publication, "payment_attempts"))
	if err == nil {
		_, err = tx.Exec(ctx, addTableSQL(c.cfg.Publication, "payment_attempts", filter))
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return fmt.Errorf("publication %s: payment_attempts must be published with the row filter %s when attempts are announced (without it when not), and cdc could not set it (%v): run migrate, or ALTER PUBLICATION as the tables' owner",
			c.cfg.Publication, attemptsFilter, err)
	}
	return nil
}
