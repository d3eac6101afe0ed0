package admin

import (
	"context"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/webhookapi"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// The operators' webhook endpoints: any tenant's (pkg/api/webhookapi does
// the work, scoped to no tenant).

func (s *Server) hooks() webhookapi.Service {
	return webhookapi.Service{DB: s.hooksDB(), Log: s.log, Loopback: s.LoopbackWebhooks}
}

// hooksDB is the webhooks' database.
func (s *Server) hooksDB() pgdb.DB {
	if s.HooksDB != nil {
		return s.HooksDB
	}
	return s.db
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

// RotateWebhookSecret asks for an endpoint's new secret: a second admin's
// approval makes it (and answers it, once).
func (s *Server) RotateWebhookSecret(ctx context.Context, req *payschedv1.RotateWebhookSecretRequest) (*payschedv1.RotateWebhookSecretResponse, error) {
	who, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if o := req.GetOverlapSeconds(); o < 0 || o > 7*24*3600 {
		return nil, invalid("overlapSeconds", "must be between 1 and 604800 (7 days; 0: 24 hours)")
	}
	id, err := s.hooks().Check(ctx, "", req.GetEndpointId())
	if err != nil {
		return nil, err
	}
	r, err := s.requestEndpoint(ctx, approval.EndpointRequest{Action: approval.Rotate, EndpointID: id, OverlapSeconds: req.GetOverlapSeconds(),
		Reason: "rotate the signing secret"}, who)
	if err != nil {
		return nil, err
	}
	return &payschedv1.RotateWebhookSecretResponse{Request: r}, nil
}

// requestEndpoint records an endpoint action for a second admin.
func (s *Server) requestEndpoint(ctx context.Context, e approval.EndpointRequest, who approval.Identity) (*payschedv1.OperatorRequest, error) {
	rid, err := s.Requests.RequestEndpoint(ctx, e, who)
	if err != nil {
		return nil, s.internal("request endpoint action", err)
	}
	got, err := s.Requests.GetEndpoint(ctx, rid)
	if err != nil {
		return nil, s.internal("read endpoint request", err)
	}
	return endpointToProto(got, ""), nil
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
// again: at once when the policy lets one admin (the default), else as a
// request a second admin's approval applies.
func (s *Server) RecoverWebhooks(ctx context.Context, req *payschedv1.RecoverWebhooksRequest) (*payschedv1.RecoverWebhooksResponse, error) {
	who, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	since, until := req.GetSince(), req.GetUntil()
	switch {
	case since == nil || since.CheckValid() != nil:
		return nil, invalid("since", "is required: recover the failed messages noted since this time")
	case until != nil && until.CheckValid() != nil:
		return nil, invalid("until", "is not a valid time")
	case until != nil && !until.AsTime().After(since.AsTime()):
		return nil, invalid("until", "must be after since")
	}
	id, err := s.hooks().Check(ctx, "", req.GetEndpointId())
	if err != nil {
		return nil, err
	}
	if s.Requests.Policy().Single[approval.Recover] {
		// One admin may (the default: it sends again what was sent).
		n, err := s.hooks().Recover(ctx, who.Name, "", id.String(), since, until)
		if err != nil {
			return nil, err
		}
		return &payschedv1.RecoverWebhooksResponse{Recovered: n}, nil
	}
	e := approval.EndpointRequest{Action: approval.Recover, EndpointID: id, Reason: "recover the failed messages"}
	from := since.AsTime()
	e.Since = &from
	if until != nil {
		to := until.AsTime()
		e.Until = &to
	}
	r, err := s.requestEndpoint(ctx, e, who)
	if err != nil {
		return nil, err
	}
	return &payschedv1.RecoverWebhooksResponse{Request: r}, nil
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
