package envelope

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Event is the part of a Debezium event the consumer reads. Row values
// are the raw JSON of the few columns it needs, slices of the record's
// value (nothing is copied): decoding whole rows into maps cost more CPU
// than the database insert of the event.
type Event struct {
	before, after       Row
	hasBefore, hasAfter bool
	Op                  string
	Source              struct {
		Table string
		LSN   int64
		TsMs  int64
	}
}

// Before is the Row before the change (nil for none or null).
func (e *Event) Before() *Row {
	if e.hasBefore {
		return &e.before
	}
	return nil
}

// After is the Row after the change (nil for none or null).
func (e *Event) After() *Row {
	if e.hasAfter {
		return &e.after
	}
	return nil
}

// Row holds the raw JSON values (nil when absent) of the columns the audit
// log and the notifications use.
type Row struct {
	// PrevStatus is payments.prev_status: the status the row left in its
	// latest update (updates carry no before image under REPLICA IDENTITY
	// DEFAULT).
	ID, PaymentID, Status, NewStatus, PrevStatus                 []byte
	Payer, Payee, Amount, Currency, DueTime, Attempt, GatewayRef []byte
	DeadLetterReason, FailureReason                              []byte
	// Tenant and UpdatedAt: whose the payment is, and when the row last
	// moved (a notification's id is made of it).
	Tenant, UpdatedAt []byte
	// ScheduleID and Occurrence: the recurring schedule that made the
	// payment and its occurrence key (null for a one-off).
	ScheduleID, Occurrence []byte
	// Kind and Data: a schedule event's kind (CREATED, PAUSED, ...) and
	// the schedule as it left it (a JSON string holding the jsonb).
	Kind, Data []byte
}

// StringOf is a raw value as a Go string when it is a JSON string (nil
// otherwise: absent, null, or another type).
func StringOf(raw []byte) *string {
	if len(raw) == 0 || raw[0] != '"' {
		return nil
	}
	s, ok := unquote(raw)
	if !ok {
		return nil
	}
	return &s
}

// Text is a valid string token's decoded bytes: the token's own bytes
// between the quotes when nothing needs decoding.
func Text(raw []byte) []byte {
	if !needsUnquote(raw) {
		return raw[1 : len(raw)-1]
	}
	s, _ := unquote(raw)
	return []byte(s)
}

// Parse reads a Debezium envelope. It accepts exactly the JSON that
// encoding/json accepts (the fuzz test holds it to that) and fails, as
// json.Unmarshal into the former struct did, when a field has the wrong type.
func Parse(b []byte) (*Event, error) {
	e := &Event{}
	return e, e.Decode(b)
}

// Decode reads b into e (reset first), allocating nothing when b holds no
// escaped strings.
func (e *Event) Decode(b []byte) error {
	*e = Event{}
	s := scanner{b: b}
	if s.null() {
		// json.Unmarshal of null into a struct leaves it as it was.
		s.ws()
		if s.i != len(s.b) {
			return errSyntax
		}
		return nil
	}
	err := s.object(e.member(&s))
	if err != nil {
		return err
	}
	s.ws()
	if s.i != len(s.b) {
		return errSyntax
	}
	return nil
}

// member reads one member of an envelope. The schema-ful form
// ({"schema":...,"payload":<envelope>}) is read through its payload.
func (e *Event) member(s *scanner) func(key []byte) error {
	return func(key []byte) error {
		switch string(key) {
		case "payload":
			if s.null() {
				return nil
			}
			return s.object(e.member(s))
		case "before", "after":
			r, has := &e.after, &e.hasAfter
			if key[0] == 'b' {
				r, has = &e.before, &e.hasBefore
			}
			if s.null() {
				*has = false
				return nil
			}
			if !*has {
				*r = Row{} // a Row after a null one starts afresh, as a new map would
			}
			*has = true
			return s.row(r)
		case "op":
			v, err := s.stringOrNull()
			e.Op = intern(v)
			return err
		case "source":
			if s.null() {
				return nil
			}
			return s.object(func(key []byte) error {
				switch string(key) {
				case "table":
					v, err := s.stringOrNull()
					e.Source.Table = intern(v)
					return err
				case "lsn":
					return s.int64OrNull(&e.Source.LSN)
				case "ts_ms":
					return s.int64OrNull(&e.Source.TsMs)
				}
				_, err := s.value()
				return err
			})
		}
		_, err := s.value()
		return err
	}
}

// intern returns the constant for the values every envelope repeats (a
// string converted from bytes is a new allocation each time).
func intern(b []byte) string {
	switch string(b) {
	case "c":
		return "c"
	case "u":
		return "u"
	case "d":
		return "d"
	case "r":
		return "r"
	case "payments":
		return "payments"
	case "payment_attempts":
		return "payment_attempts"
	case "payment_actions":
		return "payment_actions"
	case "schedule_events":
		return "schedule_events"
	}
	return string(b)
}

var (
	errSyntax = errors.New("invalid JSON")
	errType   = errors.New("unexpected JSON type")
)

// scanner is a validating JSON reader over one value.
type scanner struct {
	b     []byte
	i     int
	depth int
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// null consumes a JSON null if one comes next.
func (s *scanner) null() bool {
	s.ws()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// Row reads a Row object into r. A repeated key merges into the Row read
// before, as decoding into a map does.
func (s *scanner) row(r *Row) error {
	return s.object(func(key []byte) error {
		v, err := s.value()
		if err != nil {
			return err
		}
		switch string(key) {
		case "id":
			r.ID = v
		case "payment_id":
			r.PaymentID = v
		case "status":
			r.Status = v
		case "new_status":
			r.NewStatus = v
		case "prev_status":
			r.PrevStatus = v
		case "payer":
			r.Payer = v
		case "payee":
			r.Payee = v
		case "amount_minor":
			r.Amount = v
		case "currency":
			r.Currency = v
		case "due_time":
			r.DueTime = v
		case "attempt":
			r.Attempt = v
		case "gateway_ref":
			r.GatewayRef = v
		case "dead_letter_reason":
			r.DeadLetterReason = v
		case "failure_reason":
			r.FailureReason = v
		case "tenant":
			r.Tenant = v
		case "updated_at":
			r.UpdatedAt = v
		case "schedule_id":
			r.ScheduleID = v
		case "occurrence":
			r.Occurrence = v
		case "kind":
			r.Kind = v
		case "data":
			r.Data = v
		}
		return nil
	})
}

// object reads an object, calling fn for each key with the scanner at the
// member's value, which fn must consume.
func (s *scanner) object(fn func(key []byte) error) error {
	s.ws()
	if s.i >= len(s.b) {
		return errSyntax
	}
	if s.b[s.i] != '{' {
		if _, err := s.value(); err != nil {
			return err
		}
		return errType
	}
	if s.depth++; s.depth > maxDepth {
		return errSyntax
	}
	defer func() { s.depth-- }()
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return nil
	}
	var kbuf []byte
	for {
		s.ws()
		raw, err := s.str()
		if err != nil {
			return err
		}
		key := raw[1 : len(raw)-1]
		if needsUnquote(raw) {
			k, ok := unquote(raw)
			if !ok {
				return errSyntax
			}
			kbuf = append(kbuf[:0], k...)
			key = kbuf
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return errSyntax
		}
		s.i++
		if err := fn(key); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return errSyntax
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// stringOrNull reads a string (empty for null); another type is an error.
// The bytes alias the input unless the string holds escapes.
func (s *scanner) stringOrNull() ([]byte, error) {
	if s.null() {
		return nil, nil
	}
	raw, err := s.value()
	if err != nil {
		return nil, err
	}
	if raw[0] != '"' {
		return nil, errType
	}
	return Text(raw), nil
}

// int64OrNull reads an integer into *v (unchanged for null).
func (s *scanner) int64OrNull(v *int64) error {
	if s.null() {
		return nil
	}
	raw, err := s.value()
	if err != nil {
		return err
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return errType
	}
	*v = n
	return nil
}

// value reads any JSON value and returns its bytes.
func (s *scanner) value() ([]byte, error) {
	s.ws()
	if s.i >= len(s.b) {
		return nil, errSyntax
	}
	start := s.i
	switch c := s.b[s.i]; {
	case c == '"':
		return s.str()
	case c == '{':
		if err := s.object(func([]byte) error { _, err := s.value(); return err }); err != nil {
			return nil, err
		}
	case c == '[':
		if s.depth++; s.depth > maxDepth {
			return nil, errSyntax
		}
		defer func() { s.depth-- }()
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			break
		}
		for {
			if _, err := s.value(); err != nil {
				return nil, err
			}
			s.ws()
			if s.i >= len(s.b) {
				return nil, errSyntax
			}
			if s.b[s.i] == ']' {
				s.i++
				break
			}
			if s.b[s.i] != ',' {
				return nil, errSyntax
			}
			s.i++
		}
	case c == '-' || (c >= '0' && c <= '9'):
		if err := s.number(); err != nil {
			return nil, err
		}
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return nil, errSyntax
	}
	return s.b[start:s.i], nil
}

func (s *scanner) literal(lit string) ([]byte, error) {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return nil, errSyntax
	}
	s.i += len(lit)
	return s.b[s.i-len(lit) : s.i], nil
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return errSyntax
	}
	if i < len(b) && b[i] == '.' {
		if i = digits(b, i+1); i < 0 {
			return errSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(b, i); i < 0 {
			return errSyntax
		}
	}
	s.i = i
	return nil
}

// digits skips one or more digits from i and returns where they end, -1
// when there is none.
func digits(b []byte, i int) int {
	d := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == d {
		return -1
	}
	return i
}

// str reads a string token and returns it with its quotes.
func (s *scanner) str() ([]byte, error) {
	b, start := s.b, s.i
	if start >= len(b) || b[start] != '"' {
		return nil, errSyntax
	}
	i := start + 1
	for i < len(b) {
		// Most bytes of most strings need no decision but this one.
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return b[start:s.i], nil
		case c == '\\':
			if i+1 >= len(b) {
				return nil, errSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return nil, errSyntax
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return nil, errSyntax
					}
				}
				i += 6
			default:
				return nil, errSyntax
			}
		case c < 0x20:
			return nil, errSyntax
		default:
			i++
		}
	}
	return nil, errSyntax
}

// plain marks the bytes a string token may hold as they are: all but the
// quote, the backslash and control characters.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// needsUnquote: the string token holds an escape or bytes that decoding
// changes (non-ASCII, which may be invalid UTF-8).
func needsUnquote(raw []byte) bool {
	for _, c := range raw[1 : len(raw)-1] {
		if c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// unquote decodes a valid string token as encoding/json does (invalid
// UTF-8 and lone surrogates become U+FFFD).
func unquote(raw []byte) (string, bool) {
	body := raw[1 : len(raw)-1]
	if !needsUnquote(raw) {
		return string(body), true
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		c := body[i]
		if c == '\\' {
			switch body[i+1] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(body[i+2 : i+6])
				i += 6
				if r >= 0xD800 && r < 0xDC00 {
					// A high surrogate pairs with a following \uDC00-\uDFFF.
					if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
						if r2 := hex4(body[i+2 : i+6]); r2 >= 0xDC00 && r2 < 0xE000 {
							out = utf8.AppendRune(out, (r-0xD800)<<10|(r2-0xDC00)+0x10000)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				} else if r >= 0xDC00 && r < 0xE000 {
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
				continue
			default: // " \ /
				out = append(out, body[i+1])
			}
			i += 2
			continue
		}
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, body[i:i+n]...)
		}
		i += n
	}
	return string(out), true
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}
