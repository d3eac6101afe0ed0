package dial

import (
	"fmt"

	stripeadapter "github.com/paysched/paysched/pkg/gateway/stripe"
	"github.com/paysched/paysched/pkg/platform/config"
)

// openStripe opens the Stripe adapter (pkg/gateway/stripe) with the key
// read from --stripe-key-file; the key never reaches a log or an error.
func openStripe(f *Flags) (Gateway, error) {
	key, err := config.ReadSecret(f.StripeKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--stripe-key-file: %w", err)
	}
	a, err := stripeadapter.New(stripeadapter.Config{APIKey: key, URL: f.StripeURL})
	if err != nil {
		return nil, fmt.Errorf("--gateway=stripe: %w", err)
	}
	return a, nil
}
