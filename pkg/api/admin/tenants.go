package admin

import (
	"context"
	"math"
	"strings"
	"unicode/utf8"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/store"
)

// ListTenants implements AdminService.
func (s *Server) ListTenants(ctx context.Context, req *payschedv1.ListTenantsRequest) (*payschedv1.ListTenantsResponse, error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 100, 1000)
	if err != nil {
		return nil, err
	}
	if req.GetAfter() != "" {
		if err := checkTenant("after", req.GetAfter()); err != nil {
			return nil, err
		}
	}
	ts, next, err := store.ListTenants(ctx, s.db, req.GetAfter(), size)
	if err != nil {
		return nil, s.internal("list tenants", err)
	}
	out := &payschedv1.ListTenantsResponse{NextAfter: next}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, tenantToProto(t))
	}
	return out, nil
}

// SetTenantLimits implements AdminService.
func (s *Server) SetTenantLimits(ctx context.Context, req *payschedv1.SetTenantLimitsRequest) (*payschedv1.SetTenantLimitsResponse, error) {
	who, err := identity(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkTenant("tenant", req.GetTenant()); err != nil {
		return nil, err
	}
	l := req.GetLimits()
	set := store.TenantLimits{Tenant: req.GetTenant(), Weight: int(l.GetWeight()), UpdatedBy: "admin:" + who.Name}
	switch {
	case l.GetWeight() == 0:
		set.Weight = 1
	case l.GetWeight() < 0 || l.GetWeight() > 1000:
		return nil, invalid("limits.weight", "must be between 1 and 1000 (0: the default, 1)")
	}
	switch {
	case l.GetMaxInflight() < 0:
		return nil, invalid("limits.maxInflight", "must not be negative (0: the sweepers' default)")
	case l.GetMaxInflight() > 0:
		n := int(l.GetMaxInflight())
		set.MaxInflight = &n
	}
	switch r := l.GetMaxRate(); {
	case math.IsNaN(r) || r < 0 || r > 1_000_000:
		return nil, invalid("limits.maxRate", "must be between 0 (the sweepers' default) and 1000000 claims per second")
	case r > 0:
		set.MaxRate = &r
	}
	if err := checkNote(req.GetNote(), false); err != nil {
		return nil, err
	}
	reason := strings.TrimSpace(req.GetNote())
	if reason == "" {
		reason = "(no note)"
	}
	// A limit change always takes a second admin (a tenant's caps bound how
	// fast its money moves): the approval applies it.
	id, err := s.Requests.RequestLimits(ctx, set, reason, who)
	if err != nil {
		return nil, s.internal("request tenant limits", err)
	}
	l2, err := s.Requests.GetLimits(ctx, id)
	if err != nil {
		return nil, s.internal("read limit request", err)
	}
	return &payschedv1.SetTenantLimitsResponse{Request: limitToProto(l2)}, nil
}

// checkTenant refuses a name no payment can carry.
func checkTenant(field, t string) error {
	switch {
	case strings.TrimSpace(t) == "":
		return invalid(field, "is required")
	case !utf8.ValidString(t) || len(t) > 256:
		return invalid(field, "must be valid UTF-8, at most 256 bytes")
	case !payments.Printable(t, false):
		return invalid(field, "must not contain control, format, separator or invisible characters")
	}
	return nil
}

func tenantToProto(t store.TenantState) *payschedv1.Tenant {
	out := &payschedv1.Tenant{Tenant: t.Tenant, Due: t.Due, InFlight: t.InFlight, LatenessSeconds: t.Lateness.Seconds(),
		Limits: &payschedv1.TenantLimits{Weight: 1}}
	if l := t.Limits; l != nil {
		out.Limits.Weight, out.LimitsSetBy = int32(l.Weight), l.UpdatedBy
		if l.MaxInflight != nil {
			out.Limits.MaxInflight = int32(*l.MaxInflight)
		}
		if l.MaxRate != nil {
			out.Limits.MaxRate = *l.MaxRate
		}
	}
	return out
}
