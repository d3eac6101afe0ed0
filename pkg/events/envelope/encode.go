// Package envelope is paysched's one codec of Debezium change events: the
// cdc connector encodes them (AppendKey, AppendValue); the audit-consumer,
// the chaos checker, the benchmarks and payctl read them (Parse for the
// fields the consumer needs without decoding whole rows, DecodeChange for
// whole rows, SourceTsMs for the commit time alone). Topic names are
// pkg/events/kafka's.
package envelope

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/paysched/paysched/pkg/events/kafka"
)

// Version is reported in every envelope's source block (source.version).
// It names this encoder's envelope, not a Debezium release: it changes
// when a field is added or its meaning changes (docs/EVENTS.md).
const Version = "paysched-cdc-2"

// Column is one column of a captured relation.
type Column struct {
	Name string
	OID  uint32
	Key  bool
	// quoted is `"name":`, computed once per relation (see Prepare).
	quoted []byte
}

// Relation is a captured table as pgoutput describes it.
type Relation struct {
	Schema, Table string
	Columns       []Column
	// Computed once per relation (see Prepare): the topic, and the source
	// block's constant text around the commit time and the LSN.
	topic                                 string
	srcHead, srcSeq, srcSeqSnap, srcTable []byte
	// The schema-ful form's constant heads: {"schema":...,"payload":
	keySchemaHead, valueSchemaHead []byte
	prepared                       bool
	preparedFor                    Source
}

// Source names the connector in envelopes and topics.
type Source struct {
	Name string // logical server name: the topic prefix ("paysched")
	DB   string
}

// Topic is Debezium's <prefix>.<schema>.<table>.
func (s Source) Topic(r *Relation) string { return kafka.ChangeTopic(s.Name, r.Schema, r.Table) }

// Datum is one column value of a tuple as pgoutput sent it: Kind 'n'
// (null), 'u' (unchanged TOAST), 't' (text) or 'b' (binary), and the bytes,
// which may alias the message they were read from.
type Datum struct {
	Kind byte
	Data []byte
}

// AppendKey appends the record key of a change to b: the table's key
// columns (payments: id; payment_attempts: payment_id, attempt;
// payment_actions: id), as Debezium writes them; schedule_events: its
// schedule_id (message.key.columns). t is the after tuple, or the before one of a delete.
func AppendKey(b []byte, r *Relation, t []Datum) ([]byte, error) {
	if len(t) != len(r.Columns) {
		return nil, fmt.Errorf("%s.%s: tuple has %d columns, relation %d", r.Schema, r.Table, len(t), len(r.Columns))
	}
	b = append(b, '{')
	first := true
	for i := range r.Columns {
		col := &r.Columns[i]
		if !keyColumn(r, col) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		var err error
		if b, err = appendField(b, col, t[i]); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// keyColumn: REPLICA IDENTITY FULL marks every column as key in pgoutput,
// so the record key follows the table's primary key by name.
func keyColumn(r *Relation, c *Column) bool {
	switch r.Table {
	case "payments":
		return c.Name == "id"
	case "payment_attempts":
		return c.Name == "payment_id" || c.Name == "attempt"
	case "payment_actions":
		return c.Name == "id"
	case "schedule_events":
		// A schedule's events share its key, and so a partition: they
		// reach the notifications in the order they happened.
		return c.Name == "schedule_id"
	}
	return c.Key
}

// AppendValue appends the envelope of one change (JSON, without schemas)
// to b: op is c, u, d or r; lsn the change's WAL position and lastCommit
// the commit LSN of the transaction the connector read before this one (0:
// none known), which Debezium pairs in source.sequence; commitUs the
// transaction's commit time in Unix microseconds (Postgres' precision) and
// nowNs the connector's in Unix nanoseconds. r must be prepared (Prepare).
func AppendValue(b []byte, r *Relation, op byte, before, after []Datum, lsn, lastCommit uint64, txid uint32, commitUs, nowNs int64) ([]byte, error) {
	var err error
	b = append(b, `{"before":`...)
	if b, err = appendRow(b, r, before); err != nil {
		return nil, err
	}
	b = append(b, `,"after":`...)
	if b, err = appendRow(b, r, after); err != nil {
		return nil, err
	}
	b = append(b, r.srcHead...)
	b = strconv.AppendInt(b, commitUs/1000, 10)
	if op == 'r' {
		b = append(b, r.srcSeqSnap...)
	} else {
		b = append(b, r.srcSeq...)
	}
	if lastCommit == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, `\"`...)
		b = strconv.AppendUint(b, lastCommit, 10)
		b = append(b, `\"`...)
	}
	b = append(b, `,\"`...)
	b = strconv.AppendUint(b, lsn, 10)
	b = append(b, `\"]","ts_us":`...)
	b = strconv.AppendInt(b, commitUs, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, commitUs*1000, 10)
	b = append(b, r.srcTable...)
	b = strconv.AppendUint(b, uint64(txid), 10)
	b = append(b, `,"lsn":`...)
	b = strconv.AppendUint(b, lsn, 10)
	b = append(b, `,"xmin":null},"transaction":null,"op":"`...)
	b = append(b, op)
	b = append(b, `","ts_ms":`...)
	b = strconv.AppendInt(b, nowNs/1_000_000, 10)
	b = append(b, `,"ts_us":`...)
	b = strconv.AppendInt(b, nowNs/1000, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, nowNs, 10)
	return append(b, '}'), nil
}

func appendRow(b []byte, r *Relation, t []Datum) ([]byte, error) {
	if t == nil {
		return append(b, "null"...), nil
	}
	if len(t) != len(r.Columns) {
		return nil, fmt.Errorf("%s.%s: tuple has %d columns, relation %d", r.Schema, r.Table, len(t), len(r.Columns))
	}
	b = append(b, '{')
	for i := range r.Columns {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendField(b, &r.Columns[i], t[i]); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// Postgres type OIDs the captured tables use.
const (
	oidBool        = 16
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidJSON        = 114
	oidBpchar      = 1042
	oidVarchar     = 1043
	oidTimestamptz = 1184
	oidTimestamp   = 1114
	oidFloat8      = 701
	oidFloat4      = 700
	oidUUID        = 2950
	oidJSONB       = 3802
)

// appendField appends "name":value with Debezium's JSON encodings:
// integers as numbers, booleans, timestamps as ISO-8601 UTC strings,
// everything else (uuid, text, jsonb) as strings.
func appendField(b []byte, c *Column, v Datum) ([]byte, error) {
	if c.quoted != nil {
		b = append(b, c.quoted...)
	} else {
		b = appendString(b, c.Name)
		b = append(b, ':')
	}
	switch v.Kind {
	case 'n':
		return append(b, "null"...), nil
	case 'u':
		return append(b, `"__debezium_unavailable_value"`...), nil
	case 'b':
		return appendBinary(b, c, v.Data)
	case 't':
	default:
		return nil, fmt.Errorf("column %s: unsupported tuple data kind %q", c.Name, v.Kind)
	}
	s := v.Data
	switch c.OID {
	case oidInt2, oidInt4, oidInt8, oidFloat4, oidFloat8:
		return append(b, s...), nil
	case oidBool:
		if len(s) == 1 && s[0] == 't' {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case oidTimestamptz, oidTimestamp:
		// Fast path for UTC sessions: "2026-11-30 07:21:29.12+00" is
		// already ISO-8601 but for the 'T' and the zone.
		if n := len(s); n >= 22 && s[10] == ' ' && string(s[n-3:]) == "+00" {
			b = append(b, '"')
			b = append(b, s[:10]...)
			b = append(b, 'T')
			b = append(b, s[11:n-3]...)
			return append(b, `Z"`...), nil
		}
		t, err := parseTimestamp(string(s))
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		b = append(b, '"')
		b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.999999Z")
		return append(b, '"'), nil
	}
	return appendStringBytes(b, s), nil
}

// appendString appends s as a JSON string, without allocating when nothing
// needs escaping (ids, codes, statuses: nearly always).
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendStringBytes(b []byte, s []byte) []byte {
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(string(s))
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Topic is the relation's topic, once prepared.
func (r *Relation) Topic() string { return r.topic }

// Prepare precomputes a relation's column name prefixes, topic and the
// constant parts of its envelopes' source block for src.
func (r *Relation) Prepare(src Source) {
	if r.prepared && r.preparedFor == src {
		return
	}
	for i := range r.Columns {
		r.Columns[i].quoted = append(appendString(nil, r.Columns[i].Name), ':')
	}
	r.topic = src.Topic(r)
	r.srcHead = fmt.Appendf(nil, `,"source":{"version":%q,"connector":"postgresql","name":%q,"ts_ms":`, Version, src.Name)
	r.srcSeq = fmt.Appendf(nil, `,"snapshot":"false","db":%q,"sequence":"[`, src.DB)
	r.srcSeqSnap = fmt.Appendf(nil, `,"snapshot":"true","db":%q,"sequence":"[`, src.DB)
	r.srcTable = fmt.Appendf(nil, `,"schema":%q,"table":%q,"txId":`, r.Schema, r.Table)
	k, v := r.schemas()
	r.keySchemaHead = append(append([]byte(`{"schema":`), k...), `,"payload":`...)
	r.valueSchemaHead = append(append([]byte(`{"schema":`), v...), `,"payload":`...)
	r.prepared, r.preparedFor = true, src
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
