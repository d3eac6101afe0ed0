package dial

import "errors"

// openStripe opens the Stripe adapter (pkg/gateway/stripe).
func openStripe(f *Flags) (Gateway, error) {
	return nil, errors.New("--gateway=stripe: the Stripe adapter is not built yet")
}
