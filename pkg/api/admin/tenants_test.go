package admin_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/admin"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

// Operators set a tenant's weight and caps; bad input is refused with the
// field named (never a 500), and only with the admin claim.
func TestSetTenantLimits(t *testing.T) {
	db := pgtest.NewPool(t)
	srv := admin.New(db, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	bad := []struct {
		name string
		req  *payschedv1.SetTenantLimitsRequest
	}{
		{"no tenant", &payschedv1.SetTenantLimitsRequest{Limits: &payschedv1.TenantLimits{Weight: 2}}},
		{"blank tenant", &payschedv1.SetTenantLimitsRequest{Tenant: "  "}},
		{"control character", &payschedv1.SetTenantLimitsRequest{Tenant: "a\x00b"}},
		{"invisible character", &payschedv1.SetTenantLimitsRequest{Tenant: "acme\u200b"}},
		{"too long", &payschedv1.SetTenantLimitsRequest{Tenant: string(make([]byte, 300))}},
		{"weight 0 is the default, negative is not", &payschedv1.SetTenantLimitsRequest{Tenant: "acme", Limits: &payschedv1.TenantLimits{Weight: -1}}},
		{"weight too high", &payschedv1.SetTenantLimitsRequest{Tenant: "acme", Limits: &payschedv1.TenantLimits{Weight: 1001}}},
		{"negative in-flight cap", &payschedv1.SetTenantLimitsRequest{Tenant: "acme", Limits: &payschedv1.TenantLimits{MaxInflight: -5}}},
		{"NaN rate", &payschedv1.SetTenantLimitsRequest{Tenant: "acme", Limits: &payschedv1.TenantLimits{MaxRate: math.NaN()}}},
		{"absurd rate", &payschedv1.SetTenantLimitsRequest{Tenant: "acme", Limits: &payschedv1.TenantLimits{MaxRate: 1e12}}},
	}
	for _, tc := range bad {
		if _, err := srv.SetTenantLimits(actx, tc.req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", tc.name, err)
		}
	}
	payer := auth.WithPrincipal(ctx, auth.Principal{Actor: "alice"})
	if _, err := srv.SetTenantLimits(payer, &payschedv1.SetTenantLimitsRequest{Tenant: "acme"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("without the admin claim: %v, want PERMISSION_DENIED", err)
	}
	resp, err := srv.SetTenantLimits(actx, &payschedv1.SetTenantLimitsRequest{Tenant: "acme",
		Limits: &payschedv1.TenantLimits{Weight: 3, MaxInflight: 50, MaxRate: 12.5}})
	if err != nil {
		t.Fatal(err)
	}
	// A limit change always takes a second admin: nothing is stored until
	// one approves it (never the requester, whatever name it shows).
	r := resp.GetRequest()
	if l := r.GetLimits(); resp.GetTenant() != nil || r.GetState() != "AWAITING_APPROVAL" || l.GetWeight() != 3 || l.GetMaxInflight() != 50 || l.GetMaxRate() != 12.5 {
		t.Fatalf("answered %v", resp)
	}
	if ls, err := store.LoadTenantLimits(ctx, db); err != nil || len(ls) != 0 {
		t.Fatalf("stored before approval: %+v %v", ls, err)
	}
	renamed := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Name: "Someone Else", Admin: true})
	if _, err := srv.ApproveOperatorRequest(renamed, &payschedv1.ApproveOperatorRequestRequest{Name: r.GetName()}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("the requester's own approval: %v, want PERMISSION_DENIED", err)
	}
	bea := auth.WithPrincipal(ctx, auth.Principal{Actor: "bea", Admin: true})
	got, err := srv.ApproveOperatorRequest(bea, &payschedv1.ApproveOperatorRequestRequest{Name: r.GetName()})
	if err != nil || got.GetRequest().GetState() != "APPLIED" || got.GetRequest().GetDecidedBy() != "token:#bea" {
		t.Fatalf("approve: %v %v", got, err)
	}
	ls, err := store.LoadTenantLimits(ctx, db)
	if err != nil || len(ls) != 1 || ls[0].Weight != 3 || *ls[0].MaxInflight != 50 || *ls[0].MaxRate != 12.5 {
		t.Fatalf("tenant_limits %+v %v", ls, err)
	}
}

// ListTenants shows what each tenant has due and in flight, how late its
// oldest due payment is, and its limits; it pages in name order.
func TestListTenants(t *testing.T) {
	db := pgtest.NewPool(t)
	srv := admin.New(db, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
		 SELECT gen_random_uuid(), 'p', 'x', 100, 'USD', now() - interval '30 seconds', now() - interval '30 seconds', 'acme' FROM generate_series(1, 7)`,
		`INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant, status, lease_until, lease_owner, attempt)
		 SELECT gen_random_uuid(), 'p', 'x', 100, 'USD', now() - interval '1 second', now() - interval '1 second', 'acme', 'PROCESSING', now() + interval '1 minute', 's', 1 FROM generate_series(1, 2)`,
		`INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
		 SELECT gen_random_uuid(), 'p', 'x', 100, 'USD', now() - interval '5 seconds', now() - interval '5 seconds', 'beta' FROM generate_series(1, 3)`,
		`INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, tenant)
		 SELECT gen_random_uuid(), 'p', 'x', 100, 'USD', now() + interval '1 hour', now() + interval '1 hour', 'later' FROM generate_series(1, 3)`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.SetTenantLimits(ctx, db, store.TenantLimits{Tenant: "zeta", Weight: 5, UpdatedBy: "admin:ops"}); err != nil {
		t.Fatal(err)
	}
	actx := auth.WithPrincipal(ctx, auth.Principal{Actor: "ops", Admin: true})
	var got []*payschedv1.Tenant
	after := ""
	for pages := 0; ; pages++ {
		resp, err := srv.ListTenants(actx, &payschedv1.ListTenantsRequest{PageSize: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.GetTenants()...)
		if after = resp.GetNextAfter(); after == "" || pages > 5 {
			break
		}
	}
	if len(got) != 3 || got[0].GetTenant() != "acme" || got[1].GetTenant() != "beta" || got[2].GetTenant() != "zeta" {
		t.Fatalf("tenants %v: want acme, beta (due) and zeta (limits set), not later (nothing due)", got)
	}
	if a := got[0]; a.GetDue() != 7 || a.GetInFlight() != 2 || a.GetLatenessSeconds() < 29 || a.GetLatenessSeconds() > 60 {
		t.Fatalf("acme %v: 7 due for 30 s, 2 in flight", a)
	}
	if z := got[2]; z.GetLimits().GetWeight() != 5 || z.GetDue() != 0 {
		t.Fatalf("zeta %v", z)
	}
	if _, err := srv.ListTenants(actx, &payschedv1.ListTenantsRequest{PageSize: 5000}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("page size 5000: %v, want INVALID_ARGUMENT", err)
	}
}
