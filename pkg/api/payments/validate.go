package payments

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/payment"
)

// Limits of a create request.
const (
	MaxPayeeLen       = 128
	MaxDescriptionLen = 500
	MaxMetadataKeys   = 20
	MaxMetadataKeyLen = 40
	MaxMetadataValLen = 500
	MaxKeyLen         = 255
	MaxBatchItems     = 1000
)

// Rules are the configurable limits of validation.
type Rules struct {
	// DefaultCurrency applies when a request names none.
	DefaultCurrency string
	// AmountCap is the largest amount accepted, in minor units.
	AmountCap int64
	// Horizon is how far ahead dueAt may be.
	Horizon time.Duration
	// MaxPending caps the payments one actor may have scheduled and not
	// yet due (0: no cap).
	MaxPending int
}

// Normalize fills defaults into req and returns every violation it finds,
// field by field. now is the instant dueAt must be after. On return req has
// its currency defaulted and dueAt truncated to the microsecond (the
// database's precision), so that what is stored is what is answered.
func (r Rules) Normalize(req *payschedv1.CreateScheduledPaymentRequest, now time.Time) []apierr.Violation {
	var vs []apierr.Violation
	bad := func(field, format string, args ...any) {
		vs = append(vs, apierr.Violation{Field: field, Description: fmt.Sprintf(format, args...)})
	}

	r.checkParties(bad, req.GetPayee(), req.GetAmount(), &req.Currency)
	switch {
	case req.GetDueAt() == nil:
		bad("dueAt", "is required")
	case req.GetDueAt().CheckValid() != nil:
		bad("dueAt", "must be a valid timestamp")
	default:
		due := req.GetDueAt().AsTime().Truncate(time.Microsecond)
		req.DueAt = timestamppb.New(due)
		if !due.After(now) {
			bad("dueAt", "must be in the future")
		} else if due.After(now.Add(r.Horizon)) {
			bad("dueAt", "must be at most %s ahead", humanDuration(r.Horizon))
		}
	}
	checkText(bad, req.GetDescription(), req.GetMetadata())
	return vs
}

// checkParties checks what a payment and a schedule share of who pays
// whom how much: payee, amount and currency (defaulted in place).
func (r Rules) checkParties(bad func(field, format string, args ...any), payee string, amount int64, currency *string) {
	switch n := utf8.RuneCountInString(payee); {
	case strings.TrimSpace(payee) == "":
		bad("payee", "must not be empty")
	case n > MaxPayeeLen:
		bad("payee", "must be at most %d characters, got %d", MaxPayeeLen, n)
	case !printable(payee, false):
		bad("payee", "must be valid UTF-8 without control, format, separator or invisible characters")
	}

	switch a := amount; {
	case a <= 0:
		bad("amount", "must be greater than 0 (integer minor units)")
	case a > r.AmountCap:
		bad("amount", "must be at most %d minor units", r.AmountCap)
	}

	if *currency == "" {
		*currency = r.DefaultCurrency
	}
	if !payment.KnownCurrency(*currency) {
		bad("currency", "must be an ISO 4217 code in upper case, e.g. USD")
	}

}

// checkText checks a payment's or a schedule's description and metadata.
func checkText(bad func(field, format string, args ...any), description string, md map[string]string) {
	switch n := utf8.RuneCountInString(description); {
	case n > MaxDescriptionLen:
		bad("description", "must be at most %d characters, got %d", MaxDescriptionLen, n)
	case !printable(description, true):
		bad("description", "must be valid UTF-8 without control, format, separator or invisible characters")
	}

	if len(md) > MaxMetadataKeys {
		bad("metadata", "must have at most %d keys, got %d", MaxMetadataKeys, len(md))
	}
	for _, k := range sortedKeys(md) {
		v := md[k]
		switch n := utf8.RuneCountInString(k); {
		case n == 0:
			bad("metadata", "keys must not be empty")
		case n > MaxMetadataKeyLen:
			bad("metadata."+k, "key must be at most %d characters", MaxMetadataKeyLen)
		case !printable(k, false):
			bad("metadata", "keys must be valid UTF-8 without control, format, separator or invisible characters")
		}
		if n := utf8.RuneCountInString(v); n > MaxMetadataValLen {
			bad("metadata."+k, "value must be at most %d characters, got %d", MaxMetadataValLen, n)
		} else if !printable(v, true) {
			bad("metadata."+k, "value must be valid UTF-8 without control, format, separator or invisible characters")
		}
	}
}

// CheckKey validates an idempotency key.
func CheckKey(key string) *apierr.Violation {
	if len(key) > MaxKeyLen {
		return &apierr.Violation{Field: "idempotencyKey", Description: fmt.Sprintf("must be at most %d bytes", MaxKeyLen)}
	}
	for _, c := range key {
		if c < 0x21 || c > 0x7e {
			return &apierr.Violation{Field: "idempotencyKey", Description: "must be printable ASCII without spaces"}
		}
	}
	return nil
}

// printable rejects invalid UTF-8 and control characters (NUL among them,
// which Postgres text cannot store); multiline allows \n, \r and \t.
func printable(s string, multiline bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if multiline && (c == '\n' || c == '\r' || c == '\t') {
			continue
		}
		if unicode.IsControl(c) || c == utf8.RuneError || spoofing(c) {
			return false
		}
	}
	return true
}

// spoofing reports the characters that make a display string show other
// than it is in an operator's terminal or UI, or hide in it: every format
// character (Unicode category Cf: bidirectional overrides, embeddings,
// isolates and marks, so that "invoice\u202Efdp.exe" reads as
// "invoiceexe.pdf"; zero-width characters, the soft hyphen, invisible
// operators, interlinear annotations, tag characters), the line and
// paragraph separators (Zl, Zp: a line break where none shows), and every
// other default-ignorable code point (variation selectors, Hangul fillers,
// the combining grapheme joiner), which renderers draw as nothing: two
// payees that look the same must be the same. Emoji joined with U+200D or
// styled with U+FE0F are refused with them: a payee, a description or a
// note does not need them.
func spoofing(c rune) bool {
	return unicode.In(c, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Other_Default_Ignorable_Code_Point,
		unicode.Variation_Selector) ||
		c >= 0xE0000 && c <= 0xE0FFF // the rest of the default-ignorable tag and selector block
}

// Printable reports whether s is text an operator can trust on screen:
// valid UTF-8, no control characters (but, when multiline, newlines and
// tabs), and nothing spoofing refuses. The admin API's notes are held to
// it too.
func Printable(s string, multiline bool) bool { return printable(s, multiline) }

func humanDuration(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return d.String()
}
