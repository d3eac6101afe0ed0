package payments_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/webhookapi"
	"github.com/paysched/paysched/pkg/events/tenanthook"
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

// The deployment's default tenant is every unnamed payer's: a token naming
// it, even explicitly, manages no endpoint (DEFAULT_TENANT), whichever
// tenant the deployment made the default; another name is a tenant.
func TestTheDefaultTenantManagesNoEndpoint(t *testing.T) {
	db := pgtest.NewPool(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	as := func(tenant string) context.Context {
		return auth.WithPrincipal(ctx, auth.Principal{Actor: "bob", Tenant: tenant, TenantNamed: true})
	}
	id := uuid.NewString()
	calls := func(w *payments.Webhooks, ctx context.Context) map[string]func() error {
		return map[string]func() error{
			"create": func() error {
				_, err := w.CreateEndpoint(ctx, &payschedv1.CreateEndpointRequest{Url: "https://x.example/"})
				return err
			},
			"list": func() error { _, err := w.ListEndpoints(ctx, &payschedv1.ListEndpointsRequest{}); return err },
			"enable": func() error {
				_, err := w.SetEndpointEnabled(ctx, &payschedv1.SetEndpointEnabledRequest{EndpointId: id, Enabled: true})
				return err
			},
			"rotate": func() error {
				_, err := w.RotateEndpointSecret(ctx, &payschedv1.RotateEndpointSecretRequest{EndpointId: id})
				return err
			},
			"resend": func() error {
				_, err := w.ResendMessage(ctx, &payschedv1.ResendMessageRequest{EndpointId: id, WebhookId: "m1"})
				return err
			},
			"recover": func() error {
				_, err := w.RecoverMessages(ctx, &payschedv1.RecoverMessagesRequest{EndpointId: id, Since: timestamppb.Now()})
				return err
			},
			"attempts": func() error {
				_, err := w.ListAttempts(ctx, &payschedv1.ListAttemptsRequest{EndpointId: id})
				return err
			},
		}
	}
	refusedAll := func(name string, w *payments.Webhooks, ctx context.Context) {
		for op, call := range calls(w, ctx) {
			if err := call(); status.Code(err) != codes.PermissionDenied || apierr.Reason(err) != payments.ReasonDefaultTenant {
				t.Errorf("%s: %s: %v (reason %q), want PermissionDenied %s", name, op, err, apierr.Reason(err), payments.ReasonDefaultTenant)
			}
		}
	}
	w := payments.NewWebhooks(db, false, log)
	refusedAll("naming "+auth.DefaultTenant, w, as(auth.DefaultTenant))

	house := payments.NewWebhooks(db, false, log)
	house.DefaultTenant = "house"
	refusedAll("naming the configured default", house, as("house"))
	if _, err := house.ListEndpoints(as(auth.DefaultTenant), &payschedv1.ListEndpointsRequest{}); err != nil {
		t.Errorf("%q is a tenant like any other where the default is another: %v", auth.DefaultTenant, err)
	}
	// A token naming no tenant is still told so.
	_, err := house.ListEndpoints(auth.WithPrincipal(ctx, auth.Principal{Actor: "bob", Tenant: "house"}), &payschedv1.ListEndpointsRequest{})
	if apierr.Reason(err) != payments.ReasonNoTenant {
		t.Errorf("a token naming no tenant: %v, want %s", err, payments.ReasonNoTenant)
	}
}

// A rate under 1 a second is refused with the field named; so are the
// other limits' bounds.
func TestEndpointLimitsAreBounded(t *testing.T) {
	w := payments.NewWebhooks(pgtest.NewPool(t), false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	acme := auth.WithPrincipal(context.Background(), auth.Principal{Actor: "alice", Tenant: "acme", TenantNamed: true})
	for _, c := range []struct {
		inflight  int32
		perSecond float64
		field     string
	}{
		{0, 0.001, "maxPerSecond"},
		{0, 0.5, "maxPerSecond"},
		{0, 10001, "maxPerSecond"},
		{0, -1, "maxPerSecond"},
		{65, 0, "maxInflight"},
		{-1, 0, "maxInflight"},
	} {
		_, err := w.CreateEndpoint(acme, &payschedv1.CreateEndpointRequest{Url: "https://hooks.acme.example/",
			MaxInflight: c.inflight, MaxPerSecond: c.perSecond})
		vs := apierr.Violations(err)
		if status.Code(err) != codes.InvalidArgument || len(vs) != 1 || vs[0].Field != c.field {
			t.Errorf("in flight %d, per second %g: %v %v, want INVALID_ARGUMENT naming %s", c.inflight, c.perSecond, err, vs, c.field)
		}
	}
	got, err := w.CreateEndpoint(acme, &payschedv1.CreateEndpointRequest{Url: "https://hooks.acme.example/", MaxInflight: 64, MaxPerSecond: 1})
	if err != nil || got.GetEndpoint().GetMaxPerSecond() != 1 || got.GetEndpoint().GetMaxInflight() != 64 {
		t.Fatalf("the bounds themselves: %v %v", got, err)
	}
}

// A tenant's 17th endpoint is refused: RESOURCE_EXHAUSTED, TOO_MANY_ENDPOINTS,
// the cap in the metadata.
func TestATenantsEndpointsAreCapped(t *testing.T) {
	w := payments.NewWebhooks(pgtest.NewPool(t), false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	acme := auth.WithPrincipal(context.Background(), auth.Principal{Actor: "alice", Tenant: "acme", TenantNamed: true})
	for i := range tenanthook.MaxEndpointsPerTenant {
		if _, err := w.CreateEndpoint(acme, &payschedv1.CreateEndpointRequest{Url: fmt.Sprintf("https://hooks.acme.example/%d", i)}); err != nil {
			t.Fatalf("endpoint %d: %v", i+1, err)
		}
	}
	_, err := w.CreateEndpoint(acme, &payschedv1.CreateEndpointRequest{Url: "https://hooks.acme.example/more"})
	if status.Code(err) != codes.ResourceExhausted || apierr.Reason(err) != webhookapi.ReasonTooManyEndpoints ||
		apierr.Metadata(err, "maxEndpoints") != strconv.Itoa(tenanthook.MaxEndpointsPerTenant) {
		t.Fatalf("endpoint %d: %v (reason %q), want RESOURCE_EXHAUSTED %s", tenanthook.MaxEndpointsPerTenant+1, err, apierr.Reason(err),
			webhookapi.ReasonTooManyEndpoints)
	}
}

// Resends of one endpoint are limited per tenant: the burst passes (here to
// messages never sent: NOT_FOUND), the next is RESOURCE_EXHAUSTED
// (RATE_LIMITED) saying when to retry. Another tenant naming the endpoint
// spends its own budget, not the owner's.
func TestResendsAreRateLimited(t *testing.T) {
	w := payments.NewWebhooks(pgtest.NewPool(t), false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	acme := auth.WithPrincipal(ctx, auth.Principal{Actor: "alice", Tenant: "acme", TenantNamed: true})
	globex := auth.WithPrincipal(ctx, auth.Principal{Actor: "gina", Tenant: "globex", TenantNamed: true})
	ep, err := w.CreateEndpoint(acme, &payschedv1.CreateEndpointRequest{Url: "https://hooks.acme.example/"})
	if err != nil {
		t.Fatal(err)
	}
	id := ep.GetEndpoint().GetEndpointId()
	burst := func(who string, ctx context.Context) {
		for i := range webhookapi.ResendBurst {
			_, err := w.ResendMessage(ctx, &payschedv1.ResendMessageRequest{EndpointId: id, WebhookId: fmt.Sprintf("m%d", i)})
			if status.Code(err) != codes.NotFound {
				t.Fatalf("%s: resend %d: %v, want NOT_FOUND (never sent)", who, i+1, err)
			}
		}
		_, err := w.ResendMessage(ctx, &payschedv1.ResendMessageRequest{EndpointId: id, WebhookId: "one-more"})
		st := status.Convert(err)
		var delay time.Duration
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
		if st.Code() != codes.ResourceExhausted || apierr.Reason(err) != apierr.ReasonRateLimited ||
			delay <= 0 || delay > webhookapi.ResendEvery || !strings.Contains(st.Message(), "resends to endpoint") {
			t.Fatalf("%s: resend %d: %v (reason %q, retry in %s), want RESOURCE_EXHAUSTED RATE_LIMITED within %s", who,
				webhookapi.ResendBurst+1, err, apierr.Reason(err), delay, webhookapi.ResendEvery)
		}
	}
	burst("globex, on acme's endpoint", globex)
	burst("acme", acme)
}
