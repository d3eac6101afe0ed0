package gateway

import (
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Caps on what a gateway's strings may occupy once stored.
const (
	maxRef     = 255  // a charge id
	maxMessage = 1000 // a decline reason or an error message
)

// CleanedStrings counts gateway strings that Clean had to change; the
// services that talk to a gateway register it.
var CleanedStrings = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "paysched_gateway_strings_cleaned_total",
	Help: "Strings from the gateway (charge ids, decline reasons, messages) made storable: invalid UTF-8, NUL and control bytes replaced, length capped.",
})

// Clean makes a string from a gateway storable and readable: invalid UTF-8
// and control characters (NUL above all, which a Postgres text value
// cannot hold) become U+FFFD, and it is cut to at most max bytes on a
// character boundary. One bad string from a gateway must never keep an
// outcome, or the batch it is written with, from being recorded.
func Clean(s string, max int) string {
	if len(s) <= max && clean(s) {
		return s
	}
	CleanedStrings.Inc()
	var b strings.Builder
	b.Grow(min(len(s), max))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if r == utf8.RuneError || isControl(r) {
			r = utf8.RuneError
		}
		if b.Len()+utf8.RuneLen(r) > max-len("…") {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// clean reports whether s needs no change but a length cap.
func clean(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || isControl(r) {
			return false
		}
		i += n
	}
	return true
}

// isControl: C0 (but tab), DEL and C1 controls.
func isControl(r rune) bool {
	return r < 0x20 && r != '\t' || r >= 0x7f && r < 0xa0
}

func timestampOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// RegisterMetrics registers the port's own metrics with reg; registering
// them twice with one registry is not an error.
func RegisterMetrics(reg prometheus.Registerer) {
	if err := reg.Register(CleanedStrings); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
	}
}
