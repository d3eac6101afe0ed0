package cdc

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/paysched/paysched/pkg/events/envelope"
)

// wireTuple is a pgoutput TupleData; "<null>" is a null, "<toast>" an
// unchanged TOAST value.
func wireTuple(vals ...string) ([]byte, *pglogrepl.TupleData) {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(vals)))
	t := &pglogrepl.TupleData{ColumnNum: uint16(len(vals))}
	for _, v := range vals {
		switch v {
		case "<null>":
			b = append(b, 'n')
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'n'})
		case "<toast>":
			b = append(b, 'u')
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'u'})
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 't', Data: []byte(v)})
		}
	}
	return b, t
}

// The in-place reading of Insert, Update and Delete messages yields the
// records the former pglogrepl decoding did, byte for byte.
func TestChangeMessagesInPlace(t *testing.T) {
	src := envelope.Source{Name: "paysched", DB: "paysched"}
	rel := &envelope.Relation{Schema: "public", Table: "payments", Columns: []envelope.Column{
		{Name: "id", OID: 2950}, {Name: "payee", OID: 25}, {Name: "amount_minor", OID: 20}, {Name: "due_time", OID: 1184},
		{Name: "status", OID: 25}, {Name: "ok", OID: 16}, {Name: "metadata", OID: 3802},
	}}
	rel.Prepare(src)
	id := "01a22b54-7abf-79b7-b1b6-bd55c481e1fa"
	oldW, oldT := wireTuple(id, "bob \"<&>\" \u00e9", "1500", "2026-12-01 09:00:00.5+00", "PENDING", "t", "<toast>")
	newW, newT := wireTuple(id, "bob", "1500", "2026-12-01 11:00:00+02", "CANCELLED", "f", "<null>")
	msg := func(kind byte, parts ...[]byte) []byte {
		b := binary.BigEndian.AppendUint32([]byte{kind}, 7)
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	commit := time.Date(2026, 12, 1, 9, 0, 0, 123_000_000, time.UTC)
	now := time.Date(2026, 12, 1, 9, 0, 1, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		wire          []byte
		op            string
		before, after *pglogrepl.TupleData
	}{
		{"insert", msg('I', []byte{'N'}, newW), "c", nil, newT},
		{"update, whole old row", msg('U', []byte{'O'}, oldW, []byte{'N'}, newW), "u", oldT, newT},
		{"update, key only", msg('U', []byte{'K'}, oldW, []byte{'N'}, newW), "u", nil, newT},
		{"update, no old row", msg('U', []byte{'N'}, newW), "u", nil, newT},
		{"delete", msg('D', []byte{'O'}, oldW), "d", oldT, nil},
	} {
		c := &Connector{cfg: Config{Source: src}, rels: map[uint32]*envelope.Relation{7: rel}}
		tx := &txn{xid: 9, commitTime: commit, commitMs: commit.UnixMilli(), commitUs: commit.UnixMicro(), nowNs: now.UnixNano(), lastCommit: 4100}
		if err := c.change(tx, tc.wire, 4242); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ch := Change{Rel: rel, Op: tc.op, Before: tc.before, After: tc.after, LSN: 4242, LastCommit: 4100, TxID: 9, CommitTime: commit}
		key, err := Key(ch)
		if err != nil {
			t.Fatal(err)
		}
		val, err := Value(ch, src, now)
		if err != nil {
			t.Fatal(err)
		}
		r := tx.recs[0]
		if r.Topic != "paysched.public.payments" || !bytes.Equal(r.Key, key) || !bytes.Equal(r.Value, val) {
			t.Errorf("%s:\n got %s %s %s\nwant %s %s", tc.name, r.Topic, r.Key, r.Value, key, val)
		}
		// Truncated messages are errors, never panics.
		for n := range len(tc.wire) {
			if err := c.change(tx, tc.wire[:n], 1); err == nil {
				t.Errorf("%s truncated to %d bytes: no error", tc.name, n)
			}
		}
	}
}

func FuzzReadChange(f *testing.F) {
	w, _ := wireTuple("a", "<null>", "2026-12-01 09:00:00+00")
	f.Add(append(binary.BigEndian.AppendUint32([]byte{'U'}, 7), append(append([]byte{'O'}, w...), append([]byte{'N'}, w...)...)...))
	rel := &envelope.Relation{Schema: "public", Table: "t", Columns: []envelope.Column{{Name: "a", OID: 25}, {Name: "b", OID: 20}, {Name: "c", OID: 1184}}}
	rel.Prepare(envelope.Source{Name: "p", DB: "d"})
	f.Fuzz(func(t *testing.T, m []byte) {
		c := &Connector{rels: map[uint32]*envelope.Relation{7: rel}}
		_ = c.change(&txn{}, m, 1)
	})
}
