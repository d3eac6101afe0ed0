package cursor_test

import (
	"testing"

	"github.com/paysched/paysched/pkg/api/cursor"
)

func TestCursorRoundTripAndTamper(t *testing.T) {
	s := cursor.NewSigner([]byte("k"))
	c := s.Encode(12345, "alice")
	if pos, err := s.Decode(c, "alice"); err != nil || pos != 12345 {
		t.Fatalf("round trip: %d %v", pos, err)
	}
	bad := []struct{ c, scope string }{
		{c, "bob"},
		{c[:len(c)-1] + "A", "alice"},
		{c[:10] + flip(c[10]) + c[11:], "alice"},
		{"", "alice"},
		{"!!!", "alice"},
		{cursor.NewSigner([]byte("other")).Encode(12345, "alice"), "alice"},
	}
	for _, b := range bad {
		if _, err := s.Decode(b.c, b.scope); err == nil {
			t.Errorf("cursor %q for %q verified", b.c, b.scope)
		}
	}
}

func flip(b byte) string {
	if b == 'B' {
		return "C"
	}
	return "B"
}
