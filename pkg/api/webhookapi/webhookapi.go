// Package webhookapi is what the two APIs that manage webhook endpoints
// share: the operators' (admin-api, any tenant) and the tenants' own
// (payments-api, the token's tenant). Each checks who may call; this
// package checks the requests, calls pkg/events/tenanthook with the tenant
// scope ("" for any tenant) and maps its answers to the API's.
package webhookapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// ReasonTooManyEndpoints means the tenant has tenanthook.MaxEndpointsPerTenant
// endpoints already (metadata maxEndpoints); a new one is refused.
const ReasonTooManyEndpoints = "TOO_MANY_ENDPOINTS"

// The resend limit, per endpoint and per caller's scope (a tenant, or the
// operators): ResendBurst at once, then one every ResendEvery (10 a
// minute). Each resend has the dispatcher post again at once, and an
// endpoint's URL may be anyone's: unlimited, a caller could make paysched
// flood it. Recover is the way to send many again.
const (
	ResendBurst = 10
	ResendEvery = 6 * time.Second
)

// resends is the process's resend limit (so behind N replicas, N times
// it). A package's, not a Service's: admin-api makes a Service per call.
var resends = ratelimit.New(ratelimit.Config{Rate: float64(time.Second) / float64(ResendEvery), Burst: ResendBurst})

// Service manages endpoints over one database.
type Service struct {
	DB  pgdb.DB
	Log *slog.Logger
	// Loopback accepts endpoints on 127.0.0.1 and ::1 (development).
	Loopback bool
}

func invalid(field, desc string) error {
	return apierr.Invalid(field+" is invalid", []apierr.Violation{{Field: field, Description: desc}})
}

// NewEndpoint is the fields of an endpoint to register.
type NewEndpoint struct {
	URL          string
	EventTypes   []string
	Description  string
	MaxInflight  int32
	MaxPerSecond float64
}

// Create registers an endpoint of tenant (checked by the caller) for who.
func (s Service) Create(ctx context.Context, who, tenant string, n NewEndpoint) (*payschedv1.WebhookEndpoint, string, error) {
	e := tenanthook.Endpoint{Tenant: tenant, URL: n.URL, EventTypes: n.EventTypes, Description: n.Description,
		MaxInflight: int(n.MaxInflight), MaxPerSecond: n.MaxPerSecond}
	if err := e.Check(s.Loopback); err != nil {
		return nil, "", invalid(fieldOf(err), strings.TrimPrefix(err.Error(), tenanthook.ErrInvalid.Error()+": "))
	}
	out, secret, err := tenanthook.CreateEndpoint(ctx, s.DB, e)
	if errors.Is(err, tenanthook.ErrTooManyEndpoints) {
		// A quota, as TOO_MANY_PENDING is: no RetryInfo, since waiting
		// frees nothing (an endpoint is disabled, never deleted).
		return nil, "", apierr.New(codes.ResourceExhausted, ReasonTooManyEndpoints,
			fmt.Sprintf("tenant %q has %d webhook endpoints, the most allowed: reuse or re-enable one", tenant, tenanthook.MaxEndpointsPerTenant),
			map[string]string{"maxEndpoints": strconv.Itoa(tenanthook.MaxEndpointsPerTenant)})
	}
	if err != nil {
		return nil, "", apierr.FromFailure(s.Log, "create webhook endpoint", err)
	}
	s.Log.Info("webhook endpoint created", "by", who, "endpoint", out.ID, "tenant", out.Tenant, "url", out.URL)
	return EndpointToProto(out), secret, nil
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

// List is tenant's endpoints ("": every tenant's).
func (s Service) List(ctx context.Context, tenant string) ([]*payschedv1.WebhookEndpoint, error) {
	list, err := tenanthook.ListEndpoints(ctx, s.DB, tenant)
	if err != nil {
		return nil, apierr.FromFailure(s.Log, "list webhook endpoints", err)
	}
	out := make([]*payschedv1.WebhookEndpoint, 0, len(list))
	for _, e := range list {
		out = append(out, EndpointToProto(e))
	}
	return out, nil
}

// SetEnabled enables or disables endpoint rawID of tenant.
func (s Service) SetEnabled(ctx context.Context, who, tenant, rawID string, enabled bool) error {
	id, err := endpointID(rawID)
	if err != nil {
		return err
	}
	if err := tenanthook.SetEnabled(ctx, s.DB, tenant, id, enabled); err != nil {
		return s.mapErr("set webhook endpoint enabled", err)
	}
	s.Log.Info("webhook endpoint enabled set", "by", who, "endpoint", id, "enabled", enabled)
	return nil
}

// Rotate gives endpoint rawID of tenant a new secret; the old one signs
// beside it for overlapSeconds (0: 24 hours; at most 7 days).
func (s Service) Rotate(ctx context.Context, who, tenant, rawID string, overlapSeconds int64) (string, error) {
	id, err := endpointID(rawID)
	if err != nil {
		return "", err
	}
	overlap := time.Duration(overlapSeconds) * time.Second
	switch {
	case overlapSeconds == 0:
		overlap = 24 * time.Hour
	case overlapSeconds < 0 || overlapSeconds > 7*24*3600:
		return "", invalid("overlapSeconds", "must be between 1 and 604800 (7 days; 0: 24 hours)")
	}
	secret, err := tenanthook.RotateSecret(ctx, s.DB, tenant, id, overlap)
	if err != nil {
		return "", s.mapErr("rotate webhook secret", err)
	}
	s.Log.Info("webhook secret rotated", "by", who, "endpoint", id, "overlap", overlap)
	return secret, nil
}

// Resend makes message msgID to endpoint rawID of tenant due again now.
func (s Service) Resend(ctx context.Context, who, tenant, rawID, msgID string) error {
	id, err := endpointID(rawID)
	if err != nil {
		return err
	}
	if msgID == "" || len(msgID) > 128 {
		return invalid("webhookId", "is required (the webhook-id header of the message), at most 128 characters")
	}
	// Keyed by the caller's scope too: a tenant naming another's endpoint
	// spends its own budget, never the owner's. Tenant names are printable,
	// so NUL separates.
	if ok, wait := resends.Allow(tenant + "\x00" + id.String()); !ok {
		return resendLimited(id, wait)
	}
	if err := tenanthook.Resend(ctx, s.DB, tenant, id, msgID); err != nil {
		return s.mapErr("resend webhook", err)
	}
	s.Log.Info("webhook resent", "by", who, "endpoint", id, "webhook_id", msgID)
	return nil
}

// Recover makes every message endpoint rawID of tenant did not take since
// `since` (and before until, when set) due again now.
func (s Service) Recover(ctx context.Context, who, tenant, rawID string, since, until *timestamppb.Timestamp) (int64, error) {
	id, err := endpointID(rawID)
	if err != nil {
		return 0, err
	}
	if since == nil || since.CheckValid() != nil {
		return 0, invalid("since", "is required: recover the failed messages noted since this time")
	}
	var end *time.Time
	if until != nil {
		if until.CheckValid() != nil {
			return 0, invalid("until", "is not a valid time")
		}
		u := until.AsTime()
		end = &u
	}
	n, err := tenanthook.Recover(ctx, s.DB, tenant, id, since.AsTime(), end)
	if err != nil {
		return 0, s.mapErr("recover webhooks", err)
	}
	s.Log.Info("webhooks recovered", "by", who, "endpoint", id, "since", since.AsTime(), "recovered", n)
	return n, nil
}

// Attempts is the delivery log of a payment or an endpoint (of tenant).
func (s Service) Attempts(ctx context.Context, tenant, paymentID, rawEndpoint string, size int32) ([]*payschedv1.WebhookAttempt, error) {
	n := int(size)
	switch {
	case size == 0:
		n = 50
	case size < 0 || size > 500:
		return nil, invalid("pageSize", "must be between 1 and 500")
	}
	var pay, ep *uuid.UUID
	switch {
	case paymentID != "" && rawEndpoint != "":
		return nil, invalid("paymentId", "give a paymentId or an endpointId, not both")
	case paymentID != "":
		p, err := uuid.Parse(paymentID)
		if err != nil {
			return nil, invalid("paymentId", "must be a UUID")
		}
		pay = &p
	case rawEndpoint != "":
		e, err := endpointID(rawEndpoint)
		if err != nil {
			return nil, err
		}
		ep = &e
	default:
		return nil, invalid("paymentId", "give a paymentId or an endpointId")
	}
	list, err := tenanthook.Attempts(ctx, s.DB, tenant, pay, ep, n)
	if err != nil {
		return nil, apierr.FromFailure(s.Log, "list webhook attempts", err)
	}
	out := make([]*payschedv1.WebhookAttempt, 0, len(list))
	for _, a := range list {
		var status int32
		if a.Status != nil {
			status = int32(*a.Status)
		}
		out = append(out, &payschedv1.WebhookAttempt{EndpointId: a.Endpoint.String(), WebhookId: a.MsgID,
			EventType: a.Type, Attempt: int32(a.N), At: timestamppb.New(a.At), Status: status, LatencyMs: int32(a.LatencyMs),
			Error: a.Error, Response: a.Response, DeliveryState: a.State})
	}
	return out, nil
}

// resendLimited is the actor limit's RESOURCE_EXHAUSTED (RATE_LIMITED,
// RetryInfo: REST's 429 with Retry-After), saying which limit.
func resendLimited(id uuid.UUID, wait time.Duration) error {
	st := status.Convert(ratelimit.Exceeded(wait)).Proto()
	st.Message = fmt.Sprintf("resends to endpoint %s: at most %d a minute (recover sends many again at once); retry in %s",
		id, int(time.Minute/ResendEvery), wait.Round(time.Millisecond))
	return status.FromProto(st).Err()
}

// Check answers the id of endpoint rawID of tenant ("": any), or the
// error to answer when it is no endpoint's (INVALID_ARGUMENT, NOT_FOUND).
func (s Service) Check(ctx context.Context, tenant, rawID string) (uuid.UUID, error) {
	id, err := endpointID(rawID)
	if err != nil {
		return uuid.Nil, err
	}
	e, err := tenanthook.GetEndpoint(ctx, s.DB, id)
	if err == nil && tenant != "" && e.Tenant != tenant {
		err = fmt.Errorf("endpoint %s: %w", id, tenanthook.ErrNotFound)
	}
	if err != nil {
		return uuid.Nil, s.mapErr("endpoint", err)
	}
	return id, nil
}

func endpointID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, invalid("endpointId", "must be a UUID")
	}
	return id, nil
}

// mapErr maps the webhook package's errors: a missing endpoint (or one of
// another tenant) or message is NOT_FOUND, a bad value INVALID_ARGUMENT.
func (s Service) mapErr(op string, err error) error {
	switch {
	case errors.Is(err, tenanthook.ErrNotFound):
		return apierr.New(codes.NotFound, apierr.ReasonNotFound, strings.TrimSuffix(err.Error(), ": "+tenanthook.ErrNotFound.Error())+" not found", nil)
	case errors.Is(err, tenanthook.ErrInvalid):
		return invalid("endpoint", strings.TrimPrefix(err.Error(), tenanthook.ErrInvalid.Error()+": "))
	}
	return apierr.FromFailure(s.Log, op, err)
}

// EndpointToProto is an endpoint as the APIs show it (never its secrets).
func EndpointToProto(e tenanthook.Endpoint) *payschedv1.WebhookEndpoint {
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
