package payments

import (
	"fmt"
	"testing"
)

// TestInvisibleCharactersAreRefused: every free-text field (payee,
// description, metadata, the admin note) refuses format characters (Cf),
// line and paragraph separators (Zl, Zp) and the other default-ignorable
// code points: each is drawn as nothing, or moves text, on an operator's
// screen. The code points a review found accepted are all here.
func TestInvisibleCharactersAreRefused(t *testing.T) {
	for _, r := range []rune{
		0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x180E, 0x200B, 0x200D, 0x200E, 0x202E,
		0x2028, 0x2029, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0x2066, 0x206A, 0x206B, 0x206C, 0x206D, 0x206E, 0x206F,
		0x3164, 0xFE00, 0xFE0F, 0xFEFF, 0xFFA0, 0xFFF9, 0xFFFA, 0xFFFB,
		0x1D173, 0x1D17A, 0xE0001, 0xE0020, 0xE0041, 0xE007F, 0xE0100, 0xE01EF,
	} {
		for _, multiline := range []bool{false, true} {
			if s := fmt.Sprintf("bob%cbob", r); Printable(s, multiline) {
				t.Errorf("U+%04X accepted (multiline %v)", r, multiline)
			}
		}
	}
	for _, s := range []string{"Bob's Bakery", "Zoë & Søren", "北京", "مرحبا", "💸🏦", "Z\u0351\u036b"} {
		if !Printable(s, false) {
			t.Errorf("%q refused", s)
		}
	}
	if !Printable("line one\nline two\ttab", true) || Printable("line one\nline two", false) {
		t.Error("newlines: allowed only in multiline text")
	}
}
