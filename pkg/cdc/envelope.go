// Package cdc is a Debezium-style connector: it reads Postgres logical
// replication (pgoutput) and writes each row change to Kafka as a Debezium
// envelope, acknowledging WAL to Postgres only once Kafka has acknowledged
// every event up to it.
package cdc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
)

// Version is reported in every envelope's source block.
const Version = "paysched-cdc-1"

// Column is one column of a captured relation.
type Column struct {
	Name string
	OID  uint32
	Key  bool
	// quoted is `"name":`, computed once per relation (see quote).
	quoted []byte
}

// Relation is a captured table as pgoutput describes it.
type Relation struct {
	Schema, Table string
	Columns       []Column
}

// Change is one row change inside a committed transaction.
type Change struct {
	Rel        *Relation
	Op         string // c, u, d
	Before     *pglogrepl.TupleData
	After      *pglogrepl.TupleData
	LSN        pglogrepl.LSN // the change's own WAL position
	TxID       uint32
	CommitTime time.Time
}

// Source names the connector in envelopes and topics.
type Source struct {
	Name string // logical server name: the topic prefix ("paysched")
	DB   string
}

// Topic is Debezium's <prefix>.<schema>.<table>.
func (s Source) Topic(r *Relation) string { return s.Name + "." + r.Schema + "." + r.Table }

// Key is the record key: the table's key columns (payments: id;
// payment_attempts: payment_id, attempt), as Debezium writes them.
func Key(c Change) ([]byte, error) {
	t := c.After
	if t == nil {
		t = c.Before
	}
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for i, col := range c.Rel.Columns {
		if !keyColumn(c.Rel, col) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		if err := field(&b, col, t.Columns[i]); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// keyColumn: REPLICA IDENTITY FULL marks every column as key in pgoutput,
// so the record key follows the table's primary key by name.
func keyColumn(r *Relation, c Column) bool {
	switch r.Table {
	case "payments":
		return c.Name == "id"
	case "payment_attempts":
		return c.Name == "payment_id" || c.Name == "attempt"
	}
	return c.Key
}

// Value is the Debezium envelope (JSON, without schemas).
func Value(c Change, src Source, now time.Time) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"before":`)
	if err := row(&b, c.Rel, c.Before); err != nil {
		return nil, err
	}
	b.WriteString(`,"after":`)
	if err := row(&b, c.Rel, c.After); err != nil {
		return nil, err
	}
	lsn := strconv.FormatUint(uint64(c.LSN), 10)
	fmt.Fprintf(&b, `,"source":{"version":%q,"connector":"postgresql","name":%q,"ts_ms":%d,"snapshot":"false","db":%q,`+
		`"sequence":"[null,\"%s\"]","schema":%q,"table":%q,"txId":%d,"lsn":%s,"xmin":null}`,
		Version, src.Name, c.CommitTime.UnixMilli(), src.DB, lsn, c.Rel.Schema, c.Rel.Table, c.TxID, lsn)
	fmt.Fprintf(&b, `,"op":%q,"ts_ms":%d}`, c.Op, now.UnixMilli())
	return b.Bytes(), nil
}

func row(b *bytes.Buffer, r *Relation, t *pglogrepl.TupleData) error {
	if t == nil {
		b.WriteString("null")
		return nil
	}
	if len(t.Columns) != len(r.Columns) {
		return fmt.Errorf("%s.%s: tuple has %d columns, relation %d", r.Schema, r.Table, len(t.Columns), len(r.Columns))
	}
	b.WriteByte('{')
	for i, col := range r.Columns {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := field(b, col, t.Columns[i]); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// Postgres type OIDs the captured tables use.
const (
	oidBool        = 16
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidTimestamptz = 1184
	oidTimestamp   = 1114
	oidFloat8      = 701
	oidFloat4      = 700
)

// field writes "name":value with Debezium's JSON encodings: integers as
// numbers, booleans, timestamps as ISO-8601 UTC strings, everything else
// (uuid, text, jsonb) as strings.
func field(b *bytes.Buffer, col Column, v *pglogrepl.TupleDataColumn) error {
	if col.quoted != nil {
		b.Write(col.quoted)
	} else {
		writeString(b, col.Name)
		b.WriteByte(':')
	}
	switch v.DataType {
	case 'n':
		b.WriteString("null")
		return nil
	case 'u':
		b.WriteString(`"__debezium_unavailable_value"`)
		return nil
	}
	s := string(v.Data)
	switch col.OID {
	case oidInt2, oidInt4, oidInt8, oidFloat4, oidFloat8:
		b.WriteString(s)
	case oidBool:
		if s == "t" {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case oidTimestamptz, oidTimestamp:
		// Fast path for UTC sessions: "2026-11-30 07:21:29.12+00" is
		// already ISO-8601 but for the 'T' and the zone.
		if len(s) >= 22 && s[10] == ' ' && s[len(s)-3:] == "+00" {
			b.WriteByte('"')
			b.WriteString(s[:10])
			b.WriteByte('T')
			b.WriteString(s[11 : len(s)-3])
			b.WriteString(`Z"`)
			return nil
		}
		t, err := parseTimestamp(s)
		if err != nil {
			return fmt.Errorf("column %s: %w", col.Name, err)
		}
		b.WriteByte('"')
		b.WriteString(t.UTC().Format("2006-01-02T15:04:05.999999Z"))
		b.WriteByte('"')
	default:
		writeString(b, s)
	}
	return nil
}

// writeString writes s as a JSON string, without allocating when nothing
// needs escaping (ids, codes, statuses: nearly always).
func writeString(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			b.Write(q)
			return
		}
	}
	b.WriteByte('"')
	b.WriteString(s)
	b.WriteByte('"')
}

// quote precomputes the column name prefixes of a relation.
func (r *Relation) quote() {
	for i := range r.Columns {
		var b bytes.Buffer
		writeString(&b, r.Columns[i].Name)
		b.WriteByte(':')
		r.Columns[i].quoted = b.Bytes()
	}
}

// parseTimestamp reads Postgres' text output ("2026-11-30 07:21:29.123456+00").
func parseTimestamp(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("unparseable timestamp %q", s)
}
