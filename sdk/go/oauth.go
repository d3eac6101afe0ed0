package paysched

import (
	"context"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// ClientCredentials is an OAuth2 client-credentials token source (RFC 6749
// §4.4): a machine client's ID and secret exchanged at the identity
// provider's tokenURL for a token the payments API accepts, renewed before
// it expires. Pass it to WithTokenSource. audience, when set, is sent as
// the audience parameter (providers such as Auth0 need it).
func ClientCredentials(ctx context.Context, tokenURL, clientID, clientSecret, audience string, scopes ...string) oauth2.TokenSource {
	cfg := clientcredentials.Config{ClientID: clientID, ClientSecret: clientSecret, TokenURL: tokenURL, Scopes: scopes}
	if audience != "" {
		cfg.EndpointParams = map[string][]string{"audience": {audience}}
	}
	return cfg.TokenSource(ctx)
}
