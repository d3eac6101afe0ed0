package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/cli"
)

// schedules makes three recurring schedules, as a tenant of their own
// (their occurrences are not this run's payments), and prints the next
// occurrences of each with why they moved.
func (d *demoRun) schedules() error {
	actor := d.actor + "-plans"
	tok, err := auth.MintFor([]byte(d.o.Secret), d.o.Issuer, d.o.Audience, actor, actor, false, 30*time.Minute)
	if err != nil {
		return err
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	now := time.Now()
	firstOfNext := time.Date(now.Year(), now.Month()+1, 1, 9, 0, 0, 0, time.UTC).Format("2006-01-02T15:04")
	endOfJan := time.Date(now.Year()+1, 1, 31, 10, 0, 0, 0, time.UTC).Format("2006-01-02T15:04")
	plans := []struct {
		what string
		req  *payschedv1.CreateScheduleRequest
	}{
		{"rent on the 1st in Paris, the next business day on a French holiday", &payschedv1.CreateScheduleRequest{
			Payee: "landlord", Amount: 120000, Currency: "EUR", Rrule: "FREQ=MONTHLY;BYMONTHDAY=1", Start: firstOfNext,
			TimeZone: "Europe/Paris", BusinessDays: payschedv1.BusinessDayConvention_BUSINESS_DAY_CONVENTION_FOLLOWING, Calendar: "FR"}},
		{"salary on the last business day in New York", &payschedv1.CreateScheduleRequest{
			Payee: "staff", Amount: 450000, Currency: "USD", Rrule: "FREQ=MONTHLY;BYMONTHDAY=-1", Start: firstOfNext[:10] + "T17:00",
			TimeZone: "America/New_York", BusinessDays: payschedv1.BusinessDayConvention_BUSINESS_DAY_CONVENTION_PRECEDING, Calendar: "US"}},
		{"six instalments from Jan 31 in London, clamped at month ends", &payschedv1.CreateScheduleRequest{
			Payee: "lender", Amount: 25000, Currency: "GBP", Rrule: "FREQ=MONTHLY;COUNT=6", Start: endOfJan, TimeZone: "Europe/London"}},
	}
	sc := payschedv1.NewSchedulesServiceClient(d.conn)
	fmt.Fprintf(d.o.Out, "\nschedules (payer %s): their next occurrences, and why each moved\n", actor)
	for i, p := range plans {
		p.req.RequestId = fmt.Sprintf("%s-%d", actor, i)
		made, err := sc.CreateSchedule(ctx, p.req)
		if err != nil {
			return fmt.Errorf("create schedule %q: %w", p.what, cli.RPCError(err))
		}
		s := made.GetSchedule()
		fmt.Fprintf(d.o.Out, "  %s\n    %s  %s from %s %s\n", p.what, s.GetScheduleId(), s.GetRrule(), s.GetStart(), s.GetTimeZone())
		pv, err := sc.PreviewSchedule(ctx, &payschedv1.PreviewScheduleRequest{ScheduleId: s.GetScheduleId(), Count: 4})
		if err != nil {
			return fmt.Errorf("preview schedule %q: %w", p.what, cli.RPCError(err))
		}
		if len(pv.GetOccurrences()) == 0 {
			return fmt.Errorf("schedule %q previews no occurrence", p.what)
		}
		for _, o := range pv.GetOccurrences() {
			moved := strings.Join(o.GetMoved(), ", ")
			if moved == "" {
				moved = "-"
			}
			fmt.Fprintf(d.o.Out, "    #%d %s  charged %s  (%s)  moved: %s\n", o.GetIndex(), o.GetNominal(), o.GetLocal(),
				o.GetDueAt().AsTime().UTC().Format(time.RFC3339), moved)
		}
	}
	fmt.Fprintln(d.o.Out)
	return nil
}
