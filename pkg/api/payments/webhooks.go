package payments

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/webhookapi"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// ReasonNoTenant means the token names no tenant (only the issuer's default),
// so it may not manage webhook endpoints.
const ReasonNoTenant = "NO_TENANT"

// ReasonDefaultTenant means the token names the deployment's default tenant,
// whose endpoints are the operators' (admin-api).
const ReasonDefaultTenant = "DEFAULT_TENANT"

// Webhooks serves WebhooksService: a tenant's own webhook endpoints, the
// tenant being the token's (pkg/api/webhookapi does the work, scoped to
// it: another tenant's endpoint is NOT_FOUND).
type Webhooks struct {
	payschedv1.UnimplementedWebhooksServiceServer
	svc webhookapi.Service
	// DefaultTenant is the verifier's (auth.Config.DefaultTenant; "":
	// auth.DefaultTenant). Its payments are every unnamed payer's, so a
	// token naming it is refused too: else it would receive their events.
	DefaultTenant string
}

// NewWebhooks serves the endpoints over db; loopback accepts endpoints on
// 127.0.0.1 and ::1 (development only).
func NewWebhooks(db pgdb.DB, loopback bool, log *slog.Logger) *Webhooks {
	return &Webhooks{svc: webhookapi.Service{DB: db, Log: log, Loopback: loopback}}
}

// caller is the actor and its tenant, which the token must name, and
// which must not be the default tenant.
func (w *Webhooks) caller(ctx context.Context) (actor, tenant string, err error) {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Actor == "" {
		return "", "", auth.Unauthenticated("missing bearer token")
	}
	if !p.TenantNamed || p.Tenant == "" {
		return "", "", apierr.New(codes.PermissionDenied, ReasonNoTenant,
			"webhook endpoints are a tenant's: this token carries no tenant claim and its client has no tenant configured", nil)
	}
	def := w.DefaultTenant
	if def == "" {
		def = auth.DefaultTenant
	}
	if p.Tenant == def {
		return "", "", apierr.New(codes.PermissionDenied, ReasonDefaultTenant,
			"webhook endpoints are a tenant's: this token names the default tenant, whose payments are those of every token naming none; "+
				"its endpoints are managed by operators (admin-api)", nil)
	}
	return p.Actor, p.Tenant, nil
}

// CreateEndpoint implements WebhooksService.
func (w *Webhooks) CreateEndpoint(ctx context.Context, req *payschedv1.CreateEndpointRequest) (*payschedv1.CreateEndpointResponse, error) {
	who, tenant, err := w.caller(ctx)
	if err != nil {
		return nil, err
	}
	ep, secret, err := w.svc.Create(ctx, who, tenant, webhookapi.NewEndpoint{URL: req.GetUrl(), EventTypes: req.GetEventTypes(),
		Description: req.GetDescription(), MaxInflight: req.GetMaxInflight(), MaxPerSecond: req.GetMaxPerSecond()})
	if err != nil {
		return nil, err
	}
	return &payschedv1.CreateEndpointResponse{Endpoint: ep, Secret: secret}, nil
}

// ListEndpoints implements WebhooksService.
func (w *Webhooks) ListEndpoints(ctx context.Context, _ *payschedv1.ListEndpointsRequest) (*payschedv1.ListEndpointsResponse, error) {
	_, tenant, err := w.caller(ctx)
	if err != nil {
		return nil, err
	}
	list, err := w.svc.List(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return &payschedv1.ListEndpointsResponse{Endpoints: list}, nil
}

// SetEndpointEnabled implements WebhooksService.
func (w *Webhooks) SetEndpointEnabled(ctx context.Context, req *payschedv1.SetEndpointEnabledRequest) (*payschedv1.SetEndpointEnabledResponse, error) {
	who, tenant, err := w.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.svc.SetEnabled(ctx, who, tenant, req.GetEndpointId(), req.GetEnabled()); err != nil {
		return nil, err
	}
	return &payschedv1.SetEndpointEnabledResponse{}, nil
}

// RotateEndpointSecret implements WebhooksService.
func (w *Webhooks) RotateEndpointSecret(ctx context.Context, req *payschedv1.RotateEndpointSecretRequest) (*payschedv1.RotateEndpointSecretResponse, error) {
	who, tenant, err := w.caller(ctx)
	if err != nil {
		return nil, err
	}
	secret, err := w.svc.Rotate(ctx, who, tenant, req.GetEndpointId(), req.GetOverlapSeconds())
	if err != nil {
		return nil, err
	}
	return &payschedv1.RotateEndpointSecretResponse{Secret: secret}, nil
}

// ResendMessage implements WebhooksService.
func (w *Webhooks) ResendMessage(ctx context.Context, req *payschedv1.ResendMessageRequest) (*payschedv1.ResendMessageResponse, error) {
	who, tenant, err := w.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.svc.Resend(ctx, who, tenant, req.GetEndpointId(), req.GetWebhookId()); err != nil {
		return nil, err
	}
	return &payschedv1.ResendMessageResponse{}, nil
}

// RecoverMessages implements WebhooksService.
func (w *Webhooks) RecoverMessages(ctx context.Context, req *payschedv1.RecoverMessagesRequest) (*payschedv1.RecoverMessagesResponse, error) {
	who, tenant, err := w.caller(ctx)
	if err != nil {
		return nil, err
	}
	n, err := w.svc.Recover(ctx, who, tenant, req.GetEndpointId(), req.GetSince(), req.GetUntil())
	if err != nil {
		return nil, err
	}
	return &payschedv1.RecoverMessagesResponse{Recovered: n}, nil
}

// ListAttempts implements WebhooksService.
func (w *Webhooks) ListAttempts(ctx context.Context, req *payschedv1.ListAttemptsRequest) (*payschedv1.ListAttemptsResponse, error) {
	_, tenant, err := w.caller(ctx)
	if err != nil {
		return nil, err
	}
	list, err := w.svc.Attempts(ctx, tenant, req.GetPaymentId(), req.GetEndpointId(), req.GetPageSize())
	if err != nil {
		return nil, err
	}
	return &payschedv1.ListAttemptsResponse{Attempts: list}, nil
}
