package envelope

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
)

// pgoutput's binary mode (publication option binary 'true') sends each
// column in its type's binary form instead of the output function's text:
// the walsender then skips formatting every timestamp and uuid, the
// largest part of its cost per change. The connector decodes the binary
// forms of a closed set of types, the ones the captured tables use, into
// exactly the JSON the text forms give (TestBinaryTuplesGiveTheGoldenEnvelopes).

// BinaryTypes are the column types whose binary form the encoder reads.
// A captured column of any other type is refused when its relation is
// announced (CheckBinary), before any of its changes is read.
var BinaryTypes = map[uint32]string{
	oidBool: "boolean", oidInt2: "smallint", oidInt4: "integer", oidInt8: "bigint",
	oidText: "text", oidVarchar: "character varying", oidBpchar: "character",
	oidTimestamptz: "timestamp with time zone", oidTimestamp: "timestamp without time zone",
	oidUUID: "uuid", oidJSON: "json", oidJSONB: "jsonb",
}

// CheckBinary reports the first column of r whose binary form the encoder
// cannot read.
func CheckBinary(r *Relation) error {
	for _, c := range r.Columns {
		if _, ok := BinaryTypes[c.OID]; !ok {
			return fmt.Errorf("%s.%s column %s: type oid %d has no binary decoder here (pgoutput binary mode): stream it in text mode (cdc --pgoutput-binary=false) or add the type to envelope.BinaryTypes",
				r.Schema, r.Table, c.Name, c.OID)
		}
	}
	return nil
}

// pgEpochMicros is 2000-01-01T00:00:00Z, the origin of Postgres's
// timestamps, in Unix microseconds.
const pgEpochMicros = 946_684_800_000_000

// appendBinary appends the JSON value of a column sent in binary form, as
// appendField does for the same value sent as text.
func appendBinary(b []byte, c *Column, d []byte) ([]byte, error) {
	bad := func() ([]byte, error) {
		return nil, fmt.Errorf("column %s: %d bytes are not a binary %s", c.Name, len(d), BinaryTypes[c.OID])
	}
	switch c.OID {
	case oidBool:
		if len(d) != 1 {
			return bad()
		}
		if d[0] != 0 {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case oidInt2:
		if len(d) != 2 {
			return bad()
		}
		return strconv.AppendInt(b, int64(int16(binary.BigEndian.Uint16(d))), 10), nil
	case oidInt4:
		if len(d) != 4 {
			return bad()
		}
		return strconv.AppendInt(b, int64(int32(binary.BigEndian.Uint32(d))), 10), nil
	case oidInt8:
		if len(d) != 8 {
			return bad()
		}
		return strconv.AppendInt(b, int64(binary.BigEndian.Uint64(d)), 10), nil
	case oidText, oidVarchar, oidBpchar, oidJSON:
		return appendStringBytes(b, d), nil
	case oidJSONB:
		// Version 1, then the text form.
		if len(d) < 1 || d[0] != 1 {
			return bad()
		}
		return appendStringBytes(b, d[1:]), nil
	case oidUUID:
		if len(d) != 16 {
			return bad()
		}
		return appendUUID(b, d), nil
	case oidTimestamptz, oidTimestamp:
		if len(d) != 8 {
			return bad()
		}
		us := int64(binary.BigEndian.Uint64(d))
		if us == math.MaxInt64 || us == math.MinInt64 {
			// ±infinity: the text form, which the text path cannot parse
			// either, is refused alike.
			return nil, fmt.Errorf("column %s: unparseable timestamp %q", c.Name, map[bool]string{true: "infinity", false: "-infinity"}[us > 0])
		}
		t := time.UnixMicro(us + pgEpochMicros).UTC()
		b = append(b, '"')
		b = t.AppendFormat(b, "2006-01-02T15:04:05.999999Z")
		return append(b, '"'), nil
	}
	return nil, fmt.Errorf("column %s: type oid %d has no binary decoder", c.Name, c.OID)
}

const hexDigits = "0123456789abcdef"

// appendUUID appends the canonical text of a binary uuid, quoted.
func appendUUID(b []byte, u []byte) []byte {
	b = append(b, '"')
	for i, x := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[x>>4], hexDigits[x&0xf])
	}
	return append(b, '"')
}
