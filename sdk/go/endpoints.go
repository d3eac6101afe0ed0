package paysched

import (
	"context"
	"net/http"
	"time"

	"github.com/paysched/paysched/sdk/go/api"
)

// The tenant's webhook endpoints, as the generated layer names them.
type (
	// Endpoint is one of the tenant's webhook endpoints.
	Endpoint = api.V1WebhookEndpoint
	// NewEndpoint is an endpoint to register.
	NewEndpoint = api.V1CreateEndpointRequest
	// CreatedEndpoint is an endpoint and its signing secret, shown once.
	CreatedEndpoint = api.V1CreateEndpointResponse
	// Delivery is one delivery attempt of a message to an endpoint.
	Delivery = api.V1WebhookAttempt
	// Deliveries filters WebhookAttempts: a payment's, or an endpoint's.
	Deliveries = api.ListAttemptsParams
)

// CreateEndpoint registers a webhook endpoint of the token's tenant; the
// answer holds its signing secret, shown this once.
func (c *Client) CreateEndpoint(ctx context.Context, e NewEndpoint) (*CreatedEndpoint, error) {
	r, err := c.raw.CreateEndpointWithResponse(ctx, e)
	if err != nil {
		return nil, transport(err)
	}
	return decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK, http.StatusCreated)
}

// Endpoints lists the tenant's endpoints.
func (c *Client) Endpoints(ctx context.Context) ([]Endpoint, error) {
	r, err := c.raw.ListEndpointsWithResponse(ctx)
	if err != nil {
		return nil, transport(err)
	}
	v, err := decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return deref(v.Endpoints), nil
}

// RotateEndpointSecret gives an endpoint a new secret (returned once);
// the old one keeps signing beside it for overlap (0: 24 hours).
func (c *Client) RotateEndpointSecret(ctx context.Context, id string, overlap time.Duration) (string, error) {
	secs := int64(overlap / time.Second)
	r, err := c.raw.RotateEndpointSecretWithResponse(ctx, id, api.WebhooksServiceRotateEndpointSecretBody{OverlapSeconds: &secs})
	if err != nil {
		return "", transport(err)
	}
	if err := answered(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
		return "", err
	}
	v, err := value(r.JSON200)
	if err != nil {
		return "", err
	}
	return deref1(v.Secret), nil
}

// SetEndpointEnabled enables (clearing its failure clock) or disables an
// endpoint.
func (c *Client) SetEndpointEnabled(ctx context.Context, id string, enabled bool) error {
	r, err := c.raw.SetEndpointEnabledWithResponse(ctx, id, api.WebhooksServiceSetEndpointEnabledBody{Enabled: &enabled})
	if err != nil {
		return transport(err)
	}
	return answered(r.HTTPResponse, r.Body, http.StatusOK)
}

// ResendMessage delivers one message (by its webhook-id) to an endpoint
// again, now.
func (c *Client) ResendMessage(ctx context.Context, endpointID, webhookID string) error {
	r, err := c.raw.ResendMessageWithResponse(ctx, endpointID, api.WebhooksServiceResendMessageBody{WebhookId: &webhookID})
	if err != nil {
		return transport(err)
	}
	return answered(r.HTTPResponse, r.Body, http.StatusOK)
}

// RecoverMessages delivers again every failed message of an endpoint
// noted since (and before until, when not zero); it returns how many.
func (c *Client) RecoverMessages(ctx context.Context, endpointID string, since, until time.Time) (int64, error) {
	body := api.WebhooksServiceRecoverMessagesBody{Since: &since}
	if !until.IsZero() {
		body.Until = &until
	}
	r, err := c.raw.RecoverMessagesWithResponse(ctx, endpointID, body)
	if err != nil {
		return 0, transport(err)
	}
	if err := answered(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
		return 0, err
	}
	v, err := value(r.JSON200)
	if err != nil {
		return 0, err
	}
	return deref1(v.Recovered), nil
}

// WebhookAttempts is the delivery log of a payment or an endpoint, newest
// first.
func (c *Client) WebhookAttempts(ctx context.Context, f Deliveries) ([]Delivery, error) {
	r, err := c.raw.ListAttemptsWithResponse(ctx, &f)
	if err != nil {
		return nil, transport(err)
	}
	v, err := decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return deref(v.Attempts), nil
}
