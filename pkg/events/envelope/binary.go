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
		b = append(b, '"')
		b = appendTimestamp(b, us+pgEpochMicros)
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

// appendTimestamp appends Unix microseconds us as time.Time's AppendFormat
// with "2006-01-02T15:04:05.999999Z" would in UTC, without building a
// time.Time: the connector writes two to five timestamps per change, and
// the general formatter was a tenth of its CPU at a steady 5,000/s. Years
// outside 1..9999 go through AppendFormat.
func appendTimestamp(b []byte, us int64) []byte {
	const day = 86_400_000_000
	days, rem := us/day, us%day
	if rem < 0 {
		days, rem = days-1, rem+day
	}
	// Days since 1970-01-01 to the civil date (Howard Hinnant's
	// days_from_civil, inverted), valid across the proleptic Gregorian
	// calendar.
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	if y < 1 || y > 9999 {
		return time.UnixMicro(us).UTC().AppendFormat(b, "2006-01-02T15:04:05.999999Z")
	}
	secs, frac := rem/1_000_000, rem%1_000_000
	b = append(b, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-',
		byte('0'+m/10), byte('0'+m%10), '-', byte('0'+d/10), byte('0'+d%10), 'T')
	h, mi, s := secs/3600, secs/60%60, secs%60
	b = append(b, byte('0'+h/10), byte('0'+h%10), ':', byte('0'+mi/10), byte('0'+mi%10), ':', byte('0'+s/10), byte('0'+s%10))
	if frac != 0 {
		var digits [6]byte
		n := 6
		for i := 5; i >= 0; i-- {
			digits[i] = byte('0' + frac%10)
			frac /= 10
		}
		for n > 0 && digits[n-1] == '0' {
			n--
		}
		b = append(b, '.')
		b = append(b, digits[:n]...)
	}
	return append(b, 'Z')
}
