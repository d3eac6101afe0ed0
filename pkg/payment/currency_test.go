package payment_test

import (
	"testing"

	"github.com/paysched/paysched/pkg/payment"
)

func TestKnown(t *testing.T) {
	for code, want := range map[string]bool{"USD": true, "EUR": true, "JPY": true, "KWD": true,
		"usd": false, "XYZ": false, "": false, "US": false, "USDD": false, "XXX": false} {
		if payment.KnownCurrency(code) != want {
			t.Errorf("KnownCurrency(%q) = %v, want %v", code, !want, want)
		}
	}
}
