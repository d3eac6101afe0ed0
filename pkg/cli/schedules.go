package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
)

// planFlags are the flags of a plan: create's and preview's.
type planFlags struct {
	rule, start, zone, monthEnd, businessDays, calendar string
}

func (p *planFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&p.rule, "rrule", "", `the RFC 5545 rule, e.g. "FREQ=MONTHLY;BYMONTHDAY=-1" (the last day of each month)`)
	f.StringVar(&p.start, "start", "", "the first occurrence's local date and time, YYYY-MM-DDTHH:MM, in --time-zone")
	f.StringVar(&p.zone, "time-zone", "UTC", "IANA time zone, e.g. Europe/Paris")
	f.StringVar(&p.monthEnd, "month-end", "clamp", "a day the month lacks: clamp (its last day) or skip")
	f.StringVar(&p.businessDays, "business-days", "none", "off a weekend or holiday: none, following, modified_following or preceding")
	f.StringVar(&p.calendar, "calendar", "", "holiday calendar: a country code (US, GB, DE, ...); empty: weekends only")
}

func (p *planFlags) enums() (payschedv1.MonthEndPolicy, payschedv1.BusinessDayConvention, error) {
	me, ok := payschedv1.MonthEndPolicy_value["MONTH_END_POLICY_"+strings.ToUpper(p.monthEnd)]
	if !ok {
		return 0, 0, fmt.Errorf("--month-end %q: want clamp or skip", p.monthEnd)
	}
	bd, ok := payschedv1.BusinessDayConvention_value["BUSINESS_DAY_CONVENTION_"+strings.ToUpper(p.businessDays)]
	if !ok {
		return 0, 0, fmt.Errorf("--business-days %q: want none, following, modified_following or preceding", p.businessDays)
	}
	return payschedv1.MonthEndPolicy(me), payschedv1.BusinessDayConvention(bd), nil
}

func schedulesCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "schedules",
		Short: "Recurring schedules: payment plans whose occurrences are scheduled payments",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(scheduleCreateCmd(g), scheduleUpdateCmd(g), scheduleGetCmd(g), scheduleListCmd(g), schedulePreviewCmd(g),
		scheduleChangeCmd(g, "pause", "Pause a schedule: its occurrences made ahead are cancelled until it resumes"),
		scheduleChangeCmd(g, "resume", "Resume a paused schedule (what fell due meanwhile follows its catch-up policy)"),
		scheduleChangeCmd(g, "cancel", "End a schedule for good, cancelling its occurrences made ahead"),
		scheduleRequestCmd(g))
	return c
}

// scheduleRequestCmd is an operator's pause, resume or cancel of any
// payer's schedule, through admin-api: a request a second admin approves.
func scheduleRequestCmd(g *globals) *cobra.Command {
	var note, resume string
	c := &cobra.Command{
		Use:   "request SCHEDULE_ID pause|resume|cancel --note WHY",
		Short: "Ask, as an operator, to pause, resume or cancel a payer's schedule: a second admin approves it (admin)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			action := strings.ToUpper(args[1])
			if action != "PAUSE" && action != "RESUME" && action != "CANCEL" {
				return fmt.Errorf("%q: want pause, resume or cancel", args[1])
			}
			at, err := resumeAt(resume)
			if err != nil {
				return err
			}
			req := &payschedv1.RequestScheduleChangeRequest{ScheduleId: args[0], Action: action, Note: note, ResumeAt: at}
			resp, err := call(g, true, func(c *conn) (*payschedv1.RequestScheduleChangeResponse, error) {
				return c.admin.RequestScheduleChange(c.ctx, req)
			})
			if err != nil {
				return err
			}
			return g.printRequest(resp.GetRequest())
		},
	}
	c.Flags().StringVar(&note, "note", "", "why (required)")
	c.Flags().StringVar(&resume, "resume-at", "", "a pause's end: RFC 3339, or a duration from now (+720h)")
	return c
}

// resumeAt reads --resume-at, a pause's end, the same for a payer's pause
// and an operator's request: nil when it is not given.
func resumeAt(s string) (*timestamppb.Timestamp, error) {
	if s == "" {
		return nil, nil
	}
	at, err := parseDue(s)
	if err != nil {
		return nil, fmt.Errorf("--resume-at: %w", err)
	}
	return timestamppb.New(at), nil
}

// scheduleFlags are a schedule's fields, create's and update's.
type scheduleFlags struct {
	plan                           planFlags
	payee, currency, desc, catchUp string
	amount                         int64
	bound                          int32
	meta                           map[string]string
}

func (sf *scheduleFlags) register(c *cobra.Command) {
	sf.plan.register(c)
	f := c.Flags()
	f.StringVar(&sf.payee, "payee", "", "who is paid")
	f.Int64Var(&sf.amount, "amount", 0, "amount of each occurrence in minor units (cents)")
	f.StringVar(&sf.currency, "currency", "", "ISO 4217 code (default: the server's)")
	f.StringVar(&sf.desc, "description", "", "free text, copied to each occurrence")
	f.StringToStringVar(&sf.meta, "metadata", nil, "labels, k=v,k2=v2, copied to each occurrence")
	f.StringVar(&sf.catchUp, "catch-up", "skip_missed", "what fell due while paused: skip_missed, latest_only or all")
	f.Int32Var(&sf.bound, "catch-up-bound", 0, "with --catch-up all, at most this many (default 12)")
}

// request is the fields as a create request (update takes the same).
func (sf *scheduleFlags) request() (*payschedv1.CreateScheduleRequest, error) {
	me, bd, err := sf.plan.enums()
	if err != nil {
		return nil, err
	}
	cu, ok := payschedv1.CatchUpPolicy_value["CATCH_UP_POLICY_"+strings.ToUpper(sf.catchUp)]
	if !ok {
		return nil, fmt.Errorf("--catch-up %q: want skip_missed, latest_only or all", sf.catchUp)
	}
	return &payschedv1.CreateScheduleRequest{Payee: sf.payee, Amount: sf.amount, Currency: sf.currency, Description: sf.desc,
		Metadata: sf.meta, Rrule: sf.plan.rule, Start: sf.plan.start, TimeZone: sf.plan.zone, MonthEnd: me, BusinessDays: bd,
		Calendar: sf.plan.calendar, CatchUp: payschedv1.CatchUpPolicy(cu), CatchUpBound: sf.bound}, nil
}

func scheduleCreateCmd(g *globals) *cobra.Command {
	var sf scheduleFlags
	var key string
	c := &cobra.Command{
		Use:   "create --payee P --amount N --rrule RULE --start LOCAL --time-zone ZONE",
		Short: "Make a schedule",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := sf.request()
			if err != nil {
				return err
			}
			if key == "" {
				key = uuid.NewString()
			}
			req.RequestId = key
			resp, err := call(g, false, func(c *conn) (*payschedv1.CreateScheduleResponse, error) {
				return c.schedules.CreateSchedule(c.ctx, req)
			})
			if err != nil {
				return err
			}
			return g.printSchedules(resp, resp.GetSchedule())
		},
	}
	sf.register(c)
	c.Flags().StringVar(&key, "idempotency-key", "", "idempotency key (default: a random UUID)")
	return c
}

func scheduleUpdateCmd(g *globals) *cobra.Command {
	var sf scheduleFlags
	c := &cobra.Command{
		Use:   "update SCHEDULE_ID --payee P --amount N --rrule RULE --start LOCAL --time-zone ZONE",
		Short: "Replace a schedule's payment and plan: what was made ahead is made again as it now reads",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := sf.request()
			if err != nil {
				return err
			}
			resp, err := call(g, false, func(c *conn) (*payschedv1.UpdateScheduleResponse, error) {
				return c.schedules.UpdateSchedule(c.ctx, &payschedv1.UpdateScheduleRequest{ScheduleId: args[0], Payee: r.Payee,
					Amount: r.Amount, Currency: r.Currency, Description: r.Description, Metadata: r.Metadata, Rrule: r.Rrule,
					Start: r.Start, TimeZone: r.TimeZone, MonthEnd: r.MonthEnd, BusinessDays: r.BusinessDays, Calendar: r.Calendar,
					CatchUp: r.CatchUp, CatchUpBound: r.CatchUpBound})
			})
			if err != nil {
				return err
			}
			return g.printSchedules(resp, resp.GetSchedule())
		},
	}
	sf.register(c)
	return c
}

func scheduleGetCmd(g *globals) *cobra.Command {
	return idCmd(g, "get SCHEDULE_ID", "Show a schedule and its latest occurrences", false,
		func(c *conn, id string) (*payschedv1.GetScheduleResponse, error) {
			return c.schedules.GetSchedule(c.ctx, &payschedv1.GetScheduleRequest{ScheduleId: id})
		},
		func(resp *payschedv1.GetScheduleResponse) error {
			if g.json {
				return printJSON(g.out, resp)
			}
			if err := g.printSchedules(nil, resp.GetSchedule()); err != nil {
				return err
			}
			return g.table("\nOCCURRENCE\tINDEX\tPAYMENT ID\tDUE AT", func(w io.Writer) {
				for _, o := range resp.GetOccurrences() {
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", o.GetOccurrence(), o.GetIndex(), o.GetPaymentId(), ts(o.GetDueAt()))
				}
			})
		})
}

func scheduleListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List your schedules, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := listAll(g, false, func(c *conn, tok string) ([]*payschedv1.Schedule, string, error) {
				resp, err := c.schedules.ListSchedules(c.ctx, &payschedv1.ListSchedulesRequest{Cursor: tok, PageSize: 500})
				return resp.GetSchedules(), resp.GetNextCursor(), err
			})
			if err != nil {
				return err
			}
			return g.printSchedules(&payschedv1.ListSchedulesResponse{Schedules: all}, all...)
		},
	}
}

func schedulePreviewCmd(g *globals) *cobra.Command {
	var plan planFlags
	var count int32
	c := &cobra.Command{
		Use:   "preview [SCHEDULE_ID]",
		Short: "The next occurrences of a schedule, or of a plan (--rrule, --start, ...), and why each moved",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			me, bd, err := plan.enums()
			if err != nil {
				return err
			}
			req := &payschedv1.PreviewScheduleRequest{Count: count, Rrule: plan.rule, Start: plan.start, TimeZone: plan.zone,
				MonthEnd: me, BusinessDays: bd, Calendar: plan.calendar}
			if len(args) == 1 {
				req = &payschedv1.PreviewScheduleRequest{ScheduleId: args[0], Count: count}
			}
			resp, err := call(g, false, func(c *conn) (*payschedv1.PreviewScheduleResponse, error) {
				return c.schedules.PreviewSchedule(c.ctx, req)
			})
			if err != nil {
				return err
			}
			return g.jsonOrTable(resp, "#\tNOMINAL\tCHARGED (LOCAL)\tDUE AT (UTC)\tMOVED", func(w io.Writer) {
				for _, o := range resp.GetOccurrences() {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", o.GetIndex(), o.GetNominal(), o.GetLocal(), ts(o.GetDueAt()),
						strings.Join(o.GetMoved(), ","))
				}
			})
		},
	}
	plan.register(c)
	c.Flags().Int32Var(&count, "count", 12, "how many occurrences")
	return c
}

func scheduleChangeCmd(g *globals, verb, short string) *cobra.Command {
	var resume string
	c := &cobra.Command{
		Use:   verb + " SCHEDULE_ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rpc func(c *conn) (scheduleAnswer, error)
			switch verb {
			case "pause":
				at, err := resumeAt(resume)
				if err != nil {
					return err
				}
				req := &payschedv1.PauseScheduleRequest{ScheduleId: args[0], ResumeAt: at}
				rpc = func(c *conn) (scheduleAnswer, error) { return c.schedules.PauseSchedule(c.ctx, req) }
			case "resume":
				rpc = func(c *conn) (scheduleAnswer, error) {
					return c.schedules.ResumeSchedule(c.ctx, &payschedv1.ResumeScheduleRequest{ScheduleId: args[0]})
				}
			default:
				rpc = func(c *conn) (scheduleAnswer, error) {
					return c.schedules.CancelSchedule(c.ctx, &payschedv1.CancelScheduleRequest{ScheduleId: args[0]})
				}
			}
			resp, err := call(g, false, rpc)
			if err != nil {
				return err
			}
			return g.printSchedules(resp, resp.GetSchedule())
		},
	}
	if verb == "pause" {
		c.Flags().StringVar(&resume, "resume-at", "", "resume on its own then: RFC 3339, or a duration from now (+720h)")
	}
	return c
}

// scheduleAnswer is the answer of a call that changes one schedule.
type scheduleAnswer interface {
	proto.Message
	GetSchedule() *payschedv1.Schedule
}

func (g *globals) printSchedules(msg proto.Message, ss ...*payschedv1.Schedule) error {
	if g.json {
		if msg == nil && len(ss) == 1 {
			msg = ss[0]
		}
		return printJSON(g.out, msg)
	}
	return g.table("SCHEDULE ID\tSTATE\tPAYEE\tAMOUNT\tRULE\tSTART\tZONE\tNEXT AT", func(w io.Writer) {
		for _, s := range ss {
			next := "-"
			if s.GetNextAt() != nil {
				next = ts(s.GetNextAt())
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d %s\t%s\t%s\t%s\t%s\n", s.GetScheduleId(), strings.TrimPrefix(s.GetState().String(), "SCHEDULE_STATE_"),
				s.GetPayee(), s.GetAmount(), s.GetCurrency(), s.GetRrule(), s.GetStart(), s.GetTimeZone(), next)
		}
	})
}
