package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/cdc/cdcdb"
	"github.com/paysched/paysched/pkg/events/envelope"
)

// cdc keeps the position it last confirmed in cdc_state, outside the slot,
// so that a slot that disappears (dropped, or not carried over a failover)
// or comes back at a newer position (recreated) is noticed: streaming from
// such a slot would skip every change in between without a word, leaving a
// gap in Kafka, the audit log and the notifications.

// GapError means the slot does not continue from where cdc last confirmed.
type GapError struct {
	Slot        string
	Why         string
	ConfirmedAt time.Time
	LSN         pglogrepl.LSN
}

// Error says which slot broke off, since when, and how to resume.
func (e *GapError) Error() string {
	return fmt.Sprintf("replication slot %s: %s; cdc last confirmed %s at %s, and the changes after it would be lost: "+
		"start cdc once with --resync to recreate the slot and emit snapshot events (op r) for the rows changed since then",
		e.Slot, e.Why, e.LSN, e.ConfirmedAt.UTC().Format(time.RFC3339))
}

// ErrGap matches a *GapError with errors.Is.
var ErrGap = errors.New("replication slot gap")

// Is makes errors.Is(err, ErrGap) true.
func (e *GapError) Is(target error) bool { return target == ErrGap }

// resyncMargin widens the resync's window before the last confirmed time:
// updated_at is set when a statement runs, which can be before the commit
// that cdc confirmed later; a repeated event is harmless, a missed one not.
const resyncMargin = 10 * time.Minute

type slotState struct {
	lsn pglogrepl.LSN
	at  time.Time
}

// checkSlot compares the slot with cdc_state: nil when they agree (or when
// cdc never ran: nothing to lose), a *GapError otherwise. exists reports
// whether the slot exists.
func (c *Connector) checkSlot(ctx context.Context) (exists bool, rec *slotState, gap *GapError, err error) {
	slot, err := cdcdb.New(c.db).SlotPosition(ctx, c.cfg.Slot)
	var slotLSN *string
	if slot.ConfirmedLsn != "" {
		slotLSN = &slot.ConfirmedLsn
	}
	slotDB, ourDB := slot.SlotDatabase, slot.OurDatabase
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		exists = false
	case err != nil:
		return false, nil, nil, fmt.Errorf("check slot: %w", err)
	case slotDB != ourDB:
		// Slot names are the cluster's, not a database's: streaming from
		// another database's slot fails only once replication starts.
		return false, nil, nil, fmt.Errorf("slot %s belongs to database %q, not %q: give each database's cdc its own --slot", c.cfg.Slot, slotDB, ourDB)
	default:
		exists = true
	}
	pos, err := cdcdb.New(c.db).ConfirmedPosition(ctx, c.cfg.Slot)
	lsnText, at := pos.Lsn, pos.ConfirmedAt
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return exists, nil, nil, nil
	case err != nil:
		return exists, nil, nil, fmt.Errorf("read cdc_state: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return exists, nil, nil, fmt.Errorf("cdc_state lsn %q: %w", lsnText, err)
	}
	rec = &slotState{lsn: lsn, at: at}
	if !exists {
		return false, rec, &GapError{Slot: c.cfg.Slot, Why: "the slot is missing", ConfirmedAt: at, LSN: lsn}, nil
	}
	if slotLSN != nil {
		cur, err := pglogrepl.ParseLSN(*slotLSN)
		// cdc records a position before it confirms it (status), so the
		// slot is never ahead of the record unless something else moved it
		// or made it anew.
		if err == nil && cur > lsn {
			return true, rec, &GapError{Slot: c.cfg.Slot, Why: fmt.Sprintf("the slot starts at %s, after the last position cdc confirmed (recreated or advanced by someone else)", cur),
				ConfirmedAt: at, LSN: lsn}, nil
		}
	}
	return true, rec, nil, nil
}

// record writes lsn as the position cdc is about to confirm.
func (c *Connector) record(ctx context.Context, lsn pglogrepl.LSN) error {
	if err := cdcdb.New(c.db).RecordPosition(ctx, cdcdb.RecordPositionParams{Slot: c.cfg.Slot, Lsn: lsn.String()}); err != nil {
		return fmt.Errorf("record confirmed position: %w", err)
	}
	return nil
}

// resyncTables are read again by a resync, with the column that says when
// a row last changed.
var resyncTables = []struct{ table, changed string }{
	{"payments", "updated_at"},
	{"payment_attempts", "coalesce(finished_at, started_at)"},
	{"payment_actions", "at"},
	{"schedule_events", "at"},
}

// resync emits a snapshot event (op r, source.snapshot "true") for every
// row changed since the last confirmed time (less resyncMargin), as of the
// new slot's snapshot (exported when it was made: the rows as they were at
// its position lsn), and waits until Kafka has them all: consumers close
// the gap from them (the audit log records them; notifications follow the
// rows' status). Read at a later snapshot, a row changed after lsn came
// twice, in its snapshot and again in the stream after it, out of order.
func (c *Connector) resync(ctx context.Context, since time.Time, lsn, last pglogrepl.LSN, snapshot string) (int, error) {
	from := since.Add(-resyncMargin)
	tx, err := c.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, fmt.Errorf("resync: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if snapshot != "" {
		if _, err := tx.Exec(ctx, setSnapshotSQL(snapshot)); err != nil {
			return 0, fmt.Errorf("resync: the slot's snapshot %s: %w", snapshot, err)
		}
	}
	n := 0
	for _, t := range resyncTables {
		// Simple protocol: every value comes back as text, the form
		// pgoutput sends and the encoder reads.
		rows, err := tx.Query(ctx, resyncSQL(t.table, t.changed), pgx.QueryExecModeSimpleProtocol, from)
		if err != nil {
			return n, fmt.Errorf("resync %s: %w", t.table, err)
		}
		rel := &envelope.Relation{Schema: "public", Table: t.table}
		for _, f := range rows.FieldDescriptions() {
			rel.Columns = append(rel.Columns, envelope.Column{Name: f.Name, OID: f.DataTypeOID})
		}
		rel.Prepare(c.cfg.Source)
		now := time.Now()
		var recs []*kgo.Record
		for rows.Next() {
			raw := rows.RawValues()
			vals := make([]envelope.Datum, len(raw))
			for i, v := range raw {
				if v == nil {
					vals[i] = envelope.Datum{Kind: 'n'}
				} else {
					vals[i] = envelope.Datum{Kind: 't', Data: append([]byte(nil), v...)}
				}
			}
			appendKey, appendValue := envelope.AppendKey, envelope.AppendValue
			if c.cfg.Schemas {
				appendKey, appendValue = envelope.AppendSchemaKey, envelope.AppendSchemaValue
			}
			key, err := appendKey(nil, rel, vals)
			if err != nil {
				rows.Close()
				return n, err
			}
			val, err := appendValue(nil, rel, 'r', nil, vals, uint64(lsn), uint64(last), 0, now.UnixMicro(), now.UnixNano())
			if err != nil {
				rows.Close()
				return n, err
			}
			recs = append(recs, &kgo.Record{Topic: rel.Topic(), Key: key, Value: val})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return n, fmt.Errorf("resync %s: %w", t.table, err)
		}
		if err := c.kafk.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return n, fmt.Errorf("resync %s: produce: %w", t.table, err)
		}
		n += len(recs)
	}
	return n, nil
}
