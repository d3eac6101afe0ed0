package cdc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/paysched/paysched/pkg/events/envelope"
)

// Change is one row change inside a committed transaction.
type Change struct {
	Rel        *envelope.Relation
	Op         string // c, u, d
	Before     *pglogrepl.TupleData
	After      *pglogrepl.TupleData
	LSN        pglogrepl.LSN // the change's own WAL position
	LastCommit pglogrepl.LSN // the commit LSN of the transaction read before this one (0: none)
	TxID       uint32
	CommitTime time.Time
}

func cols(t *pglogrepl.TupleData) []envelope.Datum {
	if t == nil {
		return nil
	}
	out := make([]envelope.Datum, len(t.Columns))
	for i, c := range t.Columns {
		out[i] = envelope.Datum{Kind: c.DataType, Data: c.Data}
	}
	return out
}

// Key is the record key of c.
func Key(c Change) ([]byte, error) { return envelope.AppendKey(nil, c.Rel, keyTuple(c)) }

// Value is the Debezium envelope of c.
func Value(c Change, src envelope.Source, now time.Time) ([]byte, error) {
	return value(envelope.AppendValue, c, src, now)
}

// SchemaKey and SchemaValue are Key and Value in the schema-ful form
// (Debezium's JsonConverter with schemas.enable=true).
func SchemaKey(c Change, src envelope.Source) ([]byte, error) {
	c.Rel.Prepare(src)
	return envelope.AppendSchemaKey(nil, c.Rel, keyTuple(c))
}

// SchemaValue is Value in the schema-ful form.
func SchemaValue(c Change, src envelope.Source, now time.Time) ([]byte, error) {
	return value(envelope.AppendSchemaValue, c, src, now)
}

// keyTuple is the tuple a change's key is read from: the after image, or
// the before one of a delete.
func keyTuple(c Change) []envelope.Datum {
	if c.After != nil {
		return cols(c.After)
	}
	return cols(c.Before)
}

type appendValue func(b []byte, r *envelope.Relation, op byte, before, after []envelope.Datum, lsn, lastCommit uint64, txid uint32, commitUs, nowNs int64) ([]byte, error)

func value(appendV appendValue, c Change, src envelope.Source, now time.Time) ([]byte, error) {
	c.Rel.Prepare(src)
	return appendV(nil, c.Rel, c.Op[0], cols(c.Before), cols(c.After), uint64(c.LSN), uint64(c.LastCommit), c.TxID,
		c.CommitTime.UnixMicro(), now.UnixNano())
}

var errShort = errors.New("pgoutput: message too short")

// readTuple reads a pgoutput TupleData (Int16 count, then per column a kind
// byte and, for text or binary, an Int32 length and the bytes) into dst,
// whose values alias b; it returns what follows the tuple.
func readTuple(b []byte, dst []envelope.Datum) ([]envelope.Datum, []byte, error) {
	if len(b) < 2 {
		return nil, nil, errShort
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	dst = dst[:0]
	for range n {
		if len(b) < 1 {
			return nil, nil, errShort
		}
		k := b[0]
		b = b[1:]
		switch k {
		case 't', 'b':
			if len(b) < 4 {
				return nil, nil, errShort
			}
			l := int(binary.BigEndian.Uint32(b))
			if l < 0 || len(b) < 4+l {
				return nil, nil, errShort
			}
			dst = append(dst, envelope.Datum{Kind: k, Data: b[4 : 4+l]})
			b = b[4+l:]
		case 'n', 'u':
			dst = append(dst, envelope.Datum{Kind: k})
		default:
			return nil, nil, fmt.Errorf("pgoutput: unknown tuple data kind %q", k)
		}
	}
	return dst, b, nil
}
