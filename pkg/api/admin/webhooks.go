package admin

import (
	"context"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/webhookapi"
)

// The operators' webhook endpoints: any tenant's (pkg/api/webhookapi does
// the work, scoped to no tenant).

func (s *Server) hooks() webhookapi.Service {
	db := s.HooksDB
	if db == nil {
		db = s.db
	}
	return webhookapi.Service{DB: db, Log: s.log, Loopback: s.LoopbackWebhooks}
}

// CreateWebhookEndpoint registers an endpoint and returns its secret.
func (s *Server) CreateWebhookEndpoint(ctx context.Context, req *payschedv1.CreateWebhookEndpointRequest) (*payschedv1.CreateWebhookEndpointResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkTenant("tenant", req.GetTenant()); err != nil {
		return nil, err
	}
	ep, secret, err := s.hooks().Create(ctx, who, req.GetTenant(), webhookapi.NewEndpoint{URL: req.GetUrl(),
		EventTypes: req.GetEventTypes(), Description: req.GetDescription(), MaxInflight: req.GetMaxInflight(),
		MaxPerSecond: req.GetMaxPerSecond()})
	if err != nil {
		return nil, err
	}
	return &payschedv1.CreateWebhookEndpointResponse{Endpoint: ep, Secret: secret}, nil
}

// ListWebhookEndpoints lists a tenant's endpoints, or all.
func (s *Server) ListWebhookEndpoints(ctx context.Context, req *payschedv1.ListWebhookEndpointsRequest) (*payschedv1.ListWebhookEndpointsResponse, error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	if req.GetTenant() != "" {
		if err := checkTenant("tenant", req.GetTenant()); err != nil {
			return nil, err
		}
	}
	list, err := s.hooks().List(ctx, req.GetTenant())
	if err != nil {
		return nil, err
	}
	return &payschedv1.ListWebhookEndpointsResponse{Endpoints: list}, nil
}

// SetWebhookEndpointEnabled enables or disables an endpoint.
func (s *Server) SetWebhookEndpointEnabled(ctx context.Context, req *payschedv1.SetWebhookEndpointEnabledRequest) (*payschedv1.SetWebhookEndpointEnabledResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.hooks().SetEnabled(ctx, who, "", req.GetEndpointId(), req.GetEnabled()); err != nil {
		return nil, err
	}
	return &payschedv1.SetWebhookEndpointEnabledResponse{}, nil
}

// RotateWebhookSecret gives an endpoint a new secret.
func (s *Server) RotateWebhookSecret(ctx context.Context, req *payschedv1.RotateWebhookSecretRequest) (*payschedv1.RotateWebhookSecretResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	secret, err := s.hooks().Rotate(ctx, who, "", req.GetEndpointId(), req.GetOverlapSeconds())
	if err != nil {
		return nil, err
	}
	return &payschedv1.RotateWebhookSecretResponse{Secret: secret}, nil
}

// ResendWebhook makes one message to one endpoint due again.
func (s *Server) ResendWebhook(ctx context.Context, req *payschedv1.ResendWebhookRequest) (*payschedv1.ResendWebhookResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.hooks().Resend(ctx, who, "", req.GetEndpointId(), req.GetWebhookId()); err != nil {
		return nil, err
	}
	return &payschedv1.ResendWebhookResponse{}, nil
}

// RecoverWebhooks makes an endpoint's failed messages since a time due
// again.
func (s *Server) RecoverWebhooks(ctx context.Context, req *payschedv1.RecoverWebhooksRequest) (*payschedv1.RecoverWebhooksResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	n, err := s.hooks().Recover(ctx, who, "", req.GetEndpointId(), req.GetSince(), req.GetUntil())
	if err != nil {
		return nil, err
	}
	return &payschedv1.RecoverWebhooksResponse{Recovered: n}, nil
}

// ListWebhookAttempts is a payment's or an endpoint's delivery log.
func (s *Server) ListWebhookAttempts(ctx context.Context, req *payschedv1.ListWebhookAttemptsRequest) (*payschedv1.ListWebhookAttemptsResponse, error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	list, err := s.hooks().Attempts(ctx, "", req.GetPaymentId(), req.GetEndpointId(), req.GetPageSize())
	if err != nil {
		return nil, err
	}
	return &payschedv1.ListWebhookAttemptsResponse{Attempts: list}, nil
}
