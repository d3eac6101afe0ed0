package admin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/webhookapi"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/test/pgtest"
)

// Operators register, list, disable, rotate, resend and recover; every
// mistake is INVALID_ARGUMENT or NOT_FOUND with the field named, never a
// 500, and only with the admin claim.
func TestWebhookEndpointsThroughTheAdminAPI(t *testing.T) {
	db := pgtest.NewPool(t)
	srv := admin.New(db, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	ghost := uuid.NewString()
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		// field named in the error, when INVALID_ARGUMENT
		field string
	}{
		{"http outside development", func() error {
			_, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme", Url: "http://hooks.example.com/x"})
			return err
		}, codes.InvalidArgument, "url"},
		{"the metadata address", func() error {
			_, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme", Url: "https://169.254.169.254/latest"})
			return err
		}, codes.InvalidArgument, "url"},
		{"loopback outside development", func() error {
			_, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme", Url: "http://127.0.0.1:9/x"})
			return err
		}, codes.InvalidArgument, "url"},
		{"no tenant", func() error {
			_, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Url: "https://hooks.example.com/x"})
			return err
		}, codes.InvalidArgument, "tenant"},
		{"a bad event type", func() error {
			_, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme", Url: "https://hooks.example.com/x",
				EventTypes: []string{"payment completed"}})
			return err
		}, codes.InvalidArgument, "eventTypes"},
		{"in flight above 64", func() error {
			_, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme", Url: "https://hooks.example.com/x", MaxInflight: 65})
			return err
		}, codes.InvalidArgument, "maxInflight"},
		{"under 1 a second", func() error {
			_, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme", Url: "https://hooks.example.com/x", MaxPerSecond: 0.001})
			return err
		}, codes.InvalidArgument, "maxPerSecond"},
		{"not a UUID", func() error {
			_, err := srv.SetWebhookEndpointEnabled(actx, &payschedv1.SetWebhookEndpointEnabledRequest{EndpointId: "x"})
			return err
		}, codes.InvalidArgument, "endpointId"},
		{"no such endpoint", func() error {
			_, err := srv.SetWebhookEndpointEnabled(actx, &payschedv1.SetWebhookEndpointEnabledRequest{EndpointId: ghost})
			return err
		}, codes.NotFound, ""},
		{"rotate with a negative overlap", func() error {
			_, err := srv.RotateWebhookSecret(actx, &payschedv1.RotateWebhookSecretRequest{EndpointId: ghost, OverlapSeconds: -1})
			return err
		}, codes.InvalidArgument, "overlapSeconds"},
		{"resend without a webhook id", func() error {
			_, err := srv.ResendWebhook(actx, &payschedv1.ResendWebhookRequest{EndpointId: ghost})
			return err
		}, codes.InvalidArgument, "webhookId"},
		{"recover without since", func() error {
			_, err := srv.RecoverWebhooks(actx, &payschedv1.RecoverWebhooksRequest{EndpointId: ghost})
			return err
		}, codes.InvalidArgument, "since"},
		{"recover of no such endpoint", func() error {
			_, err := srv.RecoverWebhooks(actx, &payschedv1.RecoverWebhooksRequest{EndpointId: ghost, Since: timestamppb.Now()})
			return err
		}, codes.NotFound, ""},
		{"attempts of nothing", func() error {
			_, err := srv.ListWebhookAttempts(actx, &payschedv1.ListWebhookAttemptsRequest{})
			return err
		}, codes.InvalidArgument, "paymentId"},
		{"without the admin claim", func() error {
			_, err := srv.ListWebhookEndpoints(auth.WithPrincipal(ctx, auth.Principal{Actor: "alice"}), &payschedv1.ListWebhookEndpointsRequest{})
			return err
		}, codes.PermissionDenied, ""},
	} {
		err := tc.call()
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
			continue
		}
		if tc.field != "" && !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v does not name %s", tc.name, err, tc.field)
		}
	}

	created, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme",
		Url: "https://hooks.example.com/paysched", EventTypes: []string{"paysched.payment.completed"}})
	if err != nil {
		t.Fatal(err)
	}
	ep := created.GetEndpoint()
	if !strings.HasPrefix(created.GetSecret(), "whsec_") || !ep.GetEnabled() || ep.GetMaxInflight() != 4 || ep.GetTenant() != "acme" {
		t.Fatalf("created %v", created)
	}
	list, err := srv.ListWebhookEndpoints(actx, &payschedv1.ListWebhookEndpointsRequest{Tenant: "acme"})
	if err != nil || len(list.GetEndpoints()) != 1 || list.GetEndpoints()[0].GetEndpointId() != ep.GetEndpointId() {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := srv.SetWebhookEndpointEnabled(actx, &payschedv1.SetWebhookEndpointEnabledRequest{EndpointId: ep.GetEndpointId()}); err != nil {
		t.Fatal(err)
	}
	// A rotation always takes a second admin: its request first, nothing
	// rotated; then not by its requester; then a second admin's approval
	// makes the secret and answers it, once.
	rot, err := srv.RotateWebhookSecret(actx, &payschedv1.RotateWebhookSecretRequest{EndpointId: ep.GetEndpointId()})
	if err != nil || rot.GetSecret() != "" || rot.GetRequest().GetState() != "AWAITING_APPROVAL" || rot.GetRequest().GetAction() != "ROTATE" {
		t.Fatalf("rotate: %v %v", rot, err)
	}
	if list, _ = srv.ListWebhookEndpoints(actx, &payschedv1.ListWebhookEndpointsRequest{}); list.GetEndpoints()[0].GetRotateUntil() != nil {
		t.Fatalf("rotated by one admin: %v", list.GetEndpoints()[0])
	}
	name := &payschedv1.ApproveOperatorRequestRequest{Name: rot.GetRequest().GetName()}
	if _, err := srv.ApproveOperatorRequest(actx, name); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("own approval: %v", err)
	}
	bea := auth.WithPrincipal(ctx, auth.Principal{Actor: "bea", Admin: true})
	ok, err := srv.ApproveOperatorRequest(bea, name)
	if secret := ok.GetRequest().GetSecret(); err != nil || ok.GetRequest().GetState() != "APPLIED" || secret == created.GetSecret() ||
		tenanthook.CheckSecret(secret) != nil {
		t.Fatalf("approved rotation: %v %v", ok, err)
	}
	if again, err := srv.GetOperatorRequest(bea, &payschedv1.GetOperatorRequestRequest{Name: name.GetName()}); err != nil ||
		again.GetRequest().GetSecret() != "" || again.GetRequest().GetDecidedBy() != "token:#bea" {
		t.Fatalf("the request, read again: %v %v (the secret is shown once, never stored)", again, err)
	}
	list, _ = srv.ListWebhookEndpoints(actx, &payschedv1.ListWebhookEndpointsRequest{})
	if got := list.GetEndpoints()[0]; got.GetEnabled() || got.GetRotateUntil() == nil ||
		time.Until(got.GetRotateUntil().AsTime()) < 23*time.Hour {
		t.Fatalf("after disable and rotate: %v", got)
	}
	if _, err := srv.ResendWebhook(actx, &payschedv1.ResendWebhookRequest{EndpointId: ep.GetEndpointId(), WebhookId: "never-sent"}); status.Code(err) != codes.NotFound {
		t.Fatalf("resend of a message never sent: %v", err)
	}
	recoverReq := &payschedv1.RecoverWebhooksRequest{EndpointId: ep.GetEndpointId(), Since: timestamppb.New(time.Now().Add(-time.Hour))}
	rec, err := srv.RecoverWebhooks(actx, recoverReq)
	if err != nil || rec.GetRecovered() != 0 || rec.GetRequest() != nil {
		t.Fatalf("recover (one admin's, by default): %v %v", rec, err)
	}
	// A policy that wants two for a recovery too.
	p := approval.Strict()
	delete(p.Single, approval.Recover)
	if srv.Requests, err = approval.New(db, p, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	rec, err = srv.RecoverWebhooks(actx, recoverReq)
	if err != nil || rec.GetRequest().GetState() != "AWAITING_APPROVAL" {
		t.Fatalf("recover under a stricter policy: %v %v", rec, err)
	}
	ok, err = srv.ApproveOperatorRequest(bea, &payschedv1.ApproveOperatorRequestRequest{Name: rec.GetRequest().GetName()})
	if err != nil || ok.GetRequest().GetState() != "APPLIED" || ok.GetRequest().GetRecovered() != 0 {
		t.Fatalf("approved recovery: %v %v", ok, err)
	}
}

// Operators are held to a tenant's cap on endpoints too, and to the
// resend limit (their own budget, apart from the tenant's).
func TestWebhookEndpointCapAndResendLimitThroughTheAdminAPI(t *testing.T) {
	srv := admin.New(pgtest.NewPool(t), nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	actx := auth.WithPrincipal(context.Background(), auth.Principal{Actor: "ops", Admin: true})
	var first string
	for i := range tenanthook.MaxEndpointsPerTenant {
		r, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme", Url: fmt.Sprintf("https://hooks.example.com/%d", i)})
		if err != nil {
			t.Fatalf("endpoint %d: %v", i+1, err)
		}
		if i == 0 {
			first = r.GetEndpoint().GetEndpointId()
		}
	}
	_, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "acme", Url: "https://hooks.example.com/more"})
	if status.Code(err) != codes.ResourceExhausted || apierr.Reason(err) != webhookapi.ReasonTooManyEndpoints {
		t.Fatalf("endpoint %d: %v, want RESOURCE_EXHAUSTED %s", tenanthook.MaxEndpointsPerTenant+1, err, webhookapi.ReasonTooManyEndpoints)
	}
	if _, err := srv.CreateWebhookEndpoint(actx, &payschedv1.CreateWebhookEndpointRequest{Tenant: "globex", Url: "https://hooks.example.com/g"}); err != nil {
		t.Fatalf("another tenant's first: %v", err)
	}
	for i := range webhookapi.ResendBurst {
		_, err := srv.ResendWebhook(actx, &payschedv1.ResendWebhookRequest{EndpointId: first, WebhookId: fmt.Sprintf("m%d", i)})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("resend %d: %v, want NOT_FOUND (never sent)", i+1, err)
		}
	}
	_, err = srv.ResendWebhook(actx, &payschedv1.ResendWebhookRequest{EndpointId: first, WebhookId: "one-more"})
	if status.Code(err) != codes.ResourceExhausted || apierr.Reason(err) != apierr.ReasonRateLimited {
		t.Fatalf("resend %d: %v, want RESOURCE_EXHAUSTED RATE_LIMITED", webhookapi.ResendBurst+1, err)
	}
}
