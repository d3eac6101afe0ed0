package chaos

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/metadata"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/payment"
)

// planCount recurring schedules run in chaos: daily plans in several zones
// (Lord Howe's half-hour offset among them), each with its first
// occurrence due inside the run, made by the planners of the payments-api
// replica that the run kills in turn. Their later occurrences, made ahead
// within the horizon, are withdrawn by the schedules' cancel at the end of
// the chaos.
const planCount = 60

// planTenant is the schedules' tenant: not a webhook tenant, so the
// webhook checks count what they always did.
const planTenant = "tenant-plans"

var planZones = []string{"UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham"}

// plan is one schedule of the run and the key of its first occurrence.
type plan struct {
	id, first string
}

func (r *run) plansCtx(c context.Context) context.Context {
	tok, _ := auth.MintFor([]byte(auth.DevSecret), auth.DefaultIssuer, auth.DefaultAudience, "chaos-plans", planTenant, false, 50*time.Minute)
	return metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+tok)
}

// makePlans creates the schedules, their first occurrences spread over the
// due window.
func (r *run) makePlans(ctx context.Context, t0 time.Time) error {
	until := time.Now().Add(time.Minute)
	for i := range planCount {
		zone := planZones[i%len(planZones)]
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return err
		}
		due := t0.Add(r.cfg.Spread * time.Duration(i) / planCount).Add(2 * time.Second)
		req := &payschedv1.CreateScheduleRequest{Payee: fmt.Sprintf("plan-payee-%02d", i), Amount: int64(100 + i), Currency: "EUR",
			Rrule: "FREQ=DAILY", Start: due.In(loc).Format("2006-01-02T15:04:05"), TimeZone: zone, RequestId: fmt.Sprintf("chaos-plan-%d", i)}
		var resp *payschedv1.CreateScheduleResponse
		if err := retry(ctx, until, func(c context.Context) error {
			var err error
			resp, err = r.schedules.CreateSchedule(r.plansCtx(c), req)
			return err
		}); err != nil {
			return fmt.Errorf("create schedule %d: %w", i, err)
		}
		s := resp.GetSchedule()
		// The first occurrence from the schedule's creation on: its start,
		// unless creating it took past that.
		first := s.GetNextAt().AsTime().In(loc).Format("2006-01-02T15:04:05")
		r.plans = append(r.plans, plan{id: s.GetScheduleId(), first: first})
	}
	r.logf("schedules: %d daily plans in %d zones, their first occurrences due over the window", planCount, len(planZones))
	return nil
}

// cancelPlans ends every schedule after the chaos: what they made ahead
// (tomorrow's and later) is withdrawn, cancelled at rest.
func (r *run) cancelPlans(ctx context.Context) {
	until := time.Now().Add(2 * time.Minute)
	for _, p := range r.plans {
		if err := retry(ctx, until, func(c context.Context) error {
			_, err := r.schedules.CancelSchedule(r.plansCtx(c), &payschedv1.CancelScheduleRequest{ScheduleId: p.id})
			return err
		}); err != nil {
			r.violation("cancel schedule %s: %v", p.id, err)
		}
	}
}

// checkPlans: every schedule's first occurrence (due inside the run)
// exists exactly once and was not cancelled, no occurrence of any
// schedule has two payments that are not cancelled, and every key row
// names a payment of its schedule and key.
func (r *run) checkPlans(ctx context.Context) {
	made, missing, dup := 0, 0, 0
	for _, p := range r.plans {
		n := r.count(ctx, `SELECT count(*) FROM payments WHERE schedule_id = $1 AND occurrence = $2 AND status <> $3`, p.id, p.first,
			string(payment.Cancelled))
		made += max(n, 0)
		if n != 1 {
			missing++
			r.violation("schedule %s: its first occurrence %s has %d payments (want exactly one)", p.id, p.first, n)
		}
	}
	dup = r.count(ctx, `SELECT count(*) FROM (SELECT 1 FROM payments WHERE schedule_id IS NOT NULL AND status <> $1
		GROUP BY schedule_id, occurrence HAVING count(*) > 1) d`, string(payment.Cancelled))
	if dup != 0 {
		r.violation("schedules: %d occurrences have more than one payment", dup)
	}
	if orphans := r.count(ctx, `SELECT count(*) FROM schedule_occurrences o
		WHERE NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = o.payment_id AND p.due_time = o.due_time
		                  AND p.schedule_id = o.schedule_id AND p.occurrence = o.occurrence)`); orphans != 0 {
		r.violation("schedules: %d occurrence keys name no payment of theirs", orphans)
	}
	r.logf("schedules: %d of %d first occurrences made exactly once; %d duplicates", made, len(r.plans), dup)
}
