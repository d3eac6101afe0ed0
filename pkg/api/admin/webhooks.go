package admin

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/events/webhook"
)

// CreateWebhookEndpoint registers an endpoint and returns its secret.
func (s *Server) CreateWebhookEndpoint(ctx context.Context, req *payschedv1.CreateWebhookEndpointRequest) (*payschedv1.CreateWebhookEndpointResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkTenant("tenant", req.GetTenant()); err != nil {
		return nil, err
	}
	e := webhook.Endpoint{Tenant: req.GetTenant(), URL: req.GetUrl(), EventTypes: req.GetEventTypes(),
		Description: req.GetDescription(), MaxInflight: int(req.GetMaxInflight()), MaxPerSecond: req.GetMaxPerSecond()}
	if err := e.Check(s.LoopbackWebhooks); err != nil {
		return nil, invalid(fieldOf(err), strings.TrimPrefix(err.Error(), webhook.ErrInvalid.Error()+": "))
	}
	out, secret, err := webhook.CreateEndpoint(ctx, s.db, e)
	if err != nil {
		return nil, s.internal("create webhook endpoint", err)
	}
	s.log.Info("webhook endpoint created", "by", who, "endpoint", out.ID, "tenant", out.Tenant, "url", out.URL)
	return &payschedv1.CreateWebhookEndpointResponse{Endpoint: endpointToProto(out), Secret: secret}, nil
}

// fieldOf names the request field an endpoint check refused.
func fieldOf(err error) string {
	m := err.Error()
	switch {
	case strings.Contains(m, "URL"):
		return "url"
	case strings.Contains(m, "event type"):
		return "eventTypes"
	case strings.Contains(m, "description"):
		return "description"
	case strings.Contains(m, "in flight"):
		return "maxInflight"
	case strings.Contains(m, "per second"):
		return "maxPerSecond"
	}
	return "endpoint"
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
	list, err := webhook.ListEndpoints(ctx, s.db, req.GetTenant())
	if err != nil {
		return nil, s.internal("list webhook endpoints", err)
	}
	out := &payschedv1.ListWebhookEndpointsResponse{}
	for _, e := range list {
		out.Endpoints = append(out.Endpoints, endpointToProto(e))
	}
	return out, nil
}

// SetWebhookEndpointEnabled enables or disables an endpoint.
func (s *Server) SetWebhookEndpointEnabled(ctx context.Context, req *payschedv1.SetWebhookEndpointEnabledRequest) (*payschedv1.SetWebhookEndpointEnabledResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	id, err := endpointID(req.GetEndpointId())
	if err != nil {
		return nil, err
	}
	if err := webhook.SetEnabled(ctx, s.db, "", id, req.GetEnabled()); err != nil {
		return nil, s.webhookErr("set webhook endpoint enabled", err)
	}
	s.log.Info("webhook endpoint enabled set", "by", who, "endpoint", id, "enabled", req.GetEnabled())
	return &payschedv1.SetWebhookEndpointEnabledResponse{}, nil
}

// RotateWebhookSecret gives an endpoint a new secret.
func (s *Server) RotateWebhookSecret(ctx context.Context, req *payschedv1.RotateWebhookSecretRequest) (*payschedv1.RotateWebhookSecretResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	id, err := endpointID(req.GetEndpointId())
	if err != nil {
		return nil, err
	}
	overlap := time.Duration(req.GetOverlapSeconds()) * time.Second
	switch {
	case req.GetOverlapSeconds() == 0:
		overlap = 24 * time.Hour
	case req.GetOverlapSeconds() < 0 || req.GetOverlapSeconds() > 7*24*3600:
		return nil, invalid("overlapSeconds", "must be between 1 and 604800 (7 days; 0: 24 hours)")
	}
	secret, err := webhook.RotateSecret(ctx, s.db, "", id, overlap)
	if err != nil {
		return nil, s.webhookErr("rotate webhook secret", err)
	}
	s.log.Info("webhook secret rotated", "by", who, "endpoint", id, "overlap", overlap)
	return &payschedv1.RotateWebhookSecretResponse{Secret: secret}, nil
}

// ResendWebhook makes one message to one endpoint due again.
func (s *Server) ResendWebhook(ctx context.Context, req *payschedv1.ResendWebhookRequest) (*payschedv1.ResendWebhookResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	id, err := endpointID(req.GetEndpointId())
	if err != nil {
		return nil, err
	}
	if m := req.GetWebhookId(); m == "" || len(m) > 128 {
		return nil, invalid("webhookId", "is required (the webhook-id header of the message), at most 128 characters")
	}
	if err := webhook.Resend(ctx, s.db, "", id, req.GetWebhookId()); err != nil {
		return nil, s.webhookErr("resend webhook", err)
	}
	s.log.Info("webhook resent", "by", who, "endpoint", id, "webhook_id", req.GetWebhookId())
	return &payschedv1.ResendWebhookResponse{}, nil
}

// RecoverWebhooks makes an endpoint's failed messages since a time due
// again.
func (s *Server) RecoverWebhooks(ctx context.Context, req *payschedv1.RecoverWebhooksRequest) (*payschedv1.RecoverWebhooksResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	id, err := endpointID(req.GetEndpointId())
	if err != nil {
		return nil, err
	}
	if req.GetSince() == nil || req.GetSince().CheckValid() != nil {
		return nil, invalid("since", "is required: recover the failed messages noted since this time")
	}
	var until *time.Time
	if req.GetUntil() != nil {
		if req.GetUntil().CheckValid() != nil {
			return nil, invalid("until", "is not a valid time")
		}
		u := req.GetUntil().AsTime()
		until = &u
	}
	n, err := webhook.Recover(ctx, s.db, "", id, req.GetSince().AsTime(), until)
	if err != nil {
		return nil, s.webhookErr("recover webhooks", err)
	}
	s.log.Info("webhooks recovered", "by", who, "endpoint", id, "since", req.GetSince().AsTime(), "recovered", n)
	return &payschedv1.RecoverWebhooksResponse{Recovered: n}, nil
}

// ListWebhookAttempts is a payment's or an endpoint's delivery log.
func (s *Server) ListWebhookAttempts(ctx context.Context, req *payschedv1.ListWebhookAttemptsRequest) (*payschedv1.ListWebhookAttemptsResponse, error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 50, 500)
	if err != nil {
		return nil, err
	}
	var pay, ep *uuid.UUID
	switch {
	case req.GetPaymentId() != "" && req.GetEndpointId() != "":
		return nil, invalid("paymentId", "give a paymentId or an endpointId, not both")
	case req.GetPaymentId() != "":
		p, err := uuid.Parse(req.GetPaymentId())
		if err != nil {
			return nil, invalid("paymentId", "must be a UUID")
		}
		pay = &p
	case req.GetEndpointId() != "":
		e, err := endpointID(req.GetEndpointId())
		if err != nil {
			return nil, err
		}
		ep = &e
	default:
		return nil, invalid("paymentId", "give a paymentId or an endpointId")
	}
	list, err := webhook.Attempts(ctx, s.db, pay, ep, size)
	if err != nil {
		return nil, s.internal("list webhook attempts", err)
	}
	out := &payschedv1.ListWebhookAttemptsResponse{}
	for _, a := range list {
		var status int32
		if a.Status != nil {
			status = int32(*a.Status)
		}
		out.Attempts = append(out.Attempts, &payschedv1.WebhookAttempt{EndpointId: a.Endpoint.String(), WebhookId: a.MsgID,
			EventType: a.Type, Attempt: int32(a.N), At: timestamppb.New(a.At), Status: status, LatencyMs: int32(a.LatencyMs),
			Error: a.Error, Response: a.Response, DeliveryState: a.State})
	}
	return out, nil
}

func endpointID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, invalid("endpointId", "must be a UUID")
	}
	return id, nil
}

// webhookErr maps the webhook package's errors: a missing endpoint or
// message is NOT_FOUND, a bad value INVALID_ARGUMENT.
func (s *Server) webhookErr(op string, err error) error {
	switch {
	case errors.Is(err, webhook.ErrNotFound):
		return apierr.New(codes.NotFound, apierr.ReasonNotFound, strings.TrimSuffix(err.Error(), ": "+webhook.ErrNotFound.Error())+" not found", nil)
	case errors.Is(err, webhook.ErrInvalid):
		return invalid("endpoint", strings.TrimPrefix(err.Error(), webhook.ErrInvalid.Error()+": "))
	}
	return s.internal(op, err)
}

func endpointToProto(e webhook.Endpoint) *payschedv1.WebhookEndpoint {
	out := &payschedv1.WebhookEndpoint{EndpointId: e.ID.String(), Tenant: e.Tenant, Url: e.URL, EventTypes: e.EventTypes,
		Description: e.Description, Enabled: e.Enabled, DisabledReason: e.DisabledReason, MaxInflight: int32(e.MaxInflight),
		MaxPerSecond: e.MaxPerSecond, CreatedAt: timestamppb.New(e.CreatedAt)}
	if e.FailingSince != nil {
		out.FailingSince = timestamppb.New(*e.FailingSince)
	}
	if e.RotateUntil != nil {
		out.RotateUntil = timestamppb.New(*e.RotateUntil)
	}
	return out
}
