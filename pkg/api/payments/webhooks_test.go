package payments_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A tenant manages its own endpoints through the payers' API: another
// tenant's are NOT_FOUND to it (never listed, enabled, rotated, resent or
// recovered), a token naming no tenant is refused (NO_TENANT), and bad
// input is INVALID_ARGUMENT.
func TestTenantsManageTheirOwnEndpoints(t *testing.T) {
	db := pgtest.NewPool(t)
	w := payments.NewWebhooks(db, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	as := func(actor, tenant string, named bool) context.Context {
		return auth.WithPrincipal(ctx, auth.Principal{Actor: actor, Tenant: tenant, TenantNamed: named})
	}
	acme, globex := as("alice", "acme", true), as("gina", "globex", true)
	created, err := w.CreateEndpoint(acme, &payschedv1.CreateEndpointRequest{Url: "https://hooks.acme.example/p",
		EventTypes: []string{"paysched.payment.completed"}})
	if err != nil || created.GetSecret() == "" || created.GetEndpoint().GetTenant() != "acme" {
		t.Fatalf("create: %v %v", created, err)
	}
	id := created.GetEndpoint().GetEndpointId()
	if _, err := w.CreateEndpoint(globex, &payschedv1.CreateEndpointRequest{Url: "https://hooks.globex.example/p"}); err != nil {
		t.Fatal(err)
	}
	list, err := w.ListEndpoints(acme, &payschedv1.ListEndpointsRequest{})
	if err != nil || len(list.GetEndpoints()) != 1 || list.GetEndpoints()[0].GetEndpointId() != id {
		t.Fatalf("acme lists %v (%v), want its one endpoint", list.GetEndpoints(), err)
	}
	since := timestamppb.New(time.Now().Add(-time.Hour))
	for _, tc := range []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"no token", func() error { _, err := w.ListEndpoints(ctx, &payschedv1.ListEndpointsRequest{}); return err }, codes.Unauthenticated, ""},
		{"the default tenant", func() error {
			_, err := w.CreateEndpoint(as("bob", auth.DefaultTenant, false), &payschedv1.CreateEndpointRequest{Url: "https://x.example/"})
			return err
		}, codes.PermissionDenied, payments.ReasonNoTenant},
		{"http", func() error {
			_, err := w.CreateEndpoint(acme, &payschedv1.CreateEndpointRequest{Url: "http://hooks.acme.example/"})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
		{"another tenant's: disable", func() error {
			_, err := w.SetEndpointEnabled(globex, &payschedv1.SetEndpointEnabledRequest{EndpointId: id})
			return err
		}, codes.NotFound, apierr.ReasonNotFound},
		{"another tenant's: rotate", func() error {
			_, err := w.RotateEndpointSecret(globex, &payschedv1.RotateEndpointSecretRequest{EndpointId: id})
			return err
		}, codes.NotFound, apierr.ReasonNotFound},
		{"another tenant's: recover", func() error {
			_, err := w.RecoverMessages(globex, &payschedv1.RecoverMessagesRequest{EndpointId: id, Since: since})
			return err
		}, codes.NotFound, apierr.ReasonNotFound},
		{"another tenant's: resend", func() error {
			_, err := w.ResendMessage(globex, &payschedv1.ResendMessageRequest{EndpointId: id, WebhookId: "m1"})
			return err
		}, codes.NotFound, apierr.ReasonNotFound},
		{"a bad id", func() error {
			_, err := w.SetEndpointEnabled(acme, &payschedv1.SetEndpointEnabledRequest{EndpointId: "x"})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
		{"recover without since", func() error {
			_, err := w.RecoverMessages(acme, &payschedv1.RecoverMessagesRequest{EndpointId: id})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
		{"attempts of nothing", func() error {
			_, err := w.ListAttempts(acme, &payschedv1.ListAttemptsRequest{})
			return err
		}, codes.InvalidArgument, apierr.ReasonValidation},
	} {
		err := tc.call()
		if status.Code(err) != tc.code || (tc.reason != "" && apierr.Reason(err) != tc.reason) {
			t.Errorf("%s: %v (reason %q), want %s %s", tc.name, err, apierr.Reason(err), tc.code, tc.reason)
		}
	}
	if r, err := w.RotateEndpointSecret(acme, &payschedv1.RotateEndpointSecretRequest{EndpointId: id, OverlapSeconds: 3600}); err != nil || r.GetSecret() == "" {
		t.Fatalf("rotate its own: %v %v", r, err)
	}
	if _, err := w.SetEndpointEnabled(acme, &payschedv1.SetEndpointEnabledRequest{EndpointId: id, Enabled: false}); err != nil {
		t.Fatalf("disable its own: %v", err)
	}
	if n, err := w.RecoverMessages(acme, &payschedv1.RecoverMessagesRequest{EndpointId: id, Since: since}); err != nil || n.GetRecovered() != 0 {
		t.Fatalf("recover its own: %v %v", n, err)
	}
	got, err := w.ListAttempts(globex, &payschedv1.ListAttemptsRequest{EndpointId: id})
	if err != nil || len(got.GetAttempts()) != 0 {
		t.Fatalf("globex reads acme's delivery log: %v %v", got, err)
	}
	if _, err := w.ListAttempts(acme, &payschedv1.ListAttemptsRequest{PaymentId: uuid.NewString()}); err != nil {
		t.Fatal(err)
	}
}
