package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
)

// requestsCmd is four eyes from the terminal: the operators' requests,
// the same the console shows, listed, shown, approved and rejected.
func requestsCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "requests",
		Short: "Operators' requests awaiting a second admin: list, show, approve, reject (admin)",
	}
	var state string
	list := &cobra.Command{
		Use:   "list [--state STATE]",
		Short: "List requests: the open ones, oldest first, then the latest closed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := call(g, true, func(cn *conn) (*payschedv1.ListOperatorRequestsResponse, error) {
				return cn.admin.ListOperatorRequests(cn.ctx, &payschedv1.ListOperatorRequestsRequest{State: strings.ToUpper(state)})
			})
			if err != nil {
				return err
			}
			return g.jsonOrTable(resp, "NAME\tACTION\tSTATE\tPAYMENTS\tAMOUNTS\tREQUESTED BY\tDECIDED BY\tEXPIRES AT\tREASON", func(w io.Writer) {
				for _, r := range resp.GetRequests() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.GetName(), r.GetAction(), r.GetState(), what(r), amounts(r),
						r.GetRequestedName(), r.GetDecidedName(), expiresAt(r), clipNote(r.GetReason()))
				}
			})
		},
	}
	list.Flags().StringVar(&state, "state", "", "only requests in this state (AWAITING_APPROVAL, APPROVED, QUEUED, RUNNING, DONE, REJECTED, EXPIRED, APPLIED)")
	// The requests' own commands print the request as it now stands.
	printAnswer := func(resp requestAnswer) error { return printJSON(g.out, resp.GetRequest()) }
	show := idCmd(g, "show NAME", "Show one request (moves/<id>, limits/<id> or endpoints/<id>)", true,
		func(cn *conn, name string) (requestAnswer, error) {
			return cn.admin.GetOperatorRequest(cn.ctx, &payschedv1.GetOperatorRequestRequest{Name: name})
		}, printAnswer)
	decide := func(use string, approve bool) *cobra.Command {
		short := "Reject a request awaiting approval (never one's own): it does nothing"
		if approve {
			short = "Approve a request awaiting approval, as a second admin (never one's own): a request on one payment, or a limit change, is applied at once"
		}
		return idCmd(g, use+" NAME", short, true, func(cn *conn, name string) (requestAnswer, error) {
			if approve {
				return cn.admin.ApproveOperatorRequest(cn.ctx, &payschedv1.ApproveOperatorRequestRequest{Name: name})
			}
			return cn.admin.RejectOperatorRequest(cn.ctx, &payschedv1.RejectOperatorRequestRequest{Name: name})
		}, printAnswer)
	}
	c.AddCommand(list, show, decide("approve", true), decide("reject", false))
	return c
}

// requestAnswer is the answer of a call that shows or decides one request.
type requestAnswer interface {
	GetRequest() *payschedv1.OperatorRequest
}

// printRequest says that an action waits for a second admin, and how to
// approve it.
func (g *globals) printRequest(r *payschedv1.OperatorRequest) error {
	if g.json {
		return printJSON(g.out, r)
	}
	fmt.Fprintf(g.out, "request %s (%s on %s) awaits a second admin's approval: nothing moved yet\n", r.GetName(), r.GetAction(), what(r))
	fmt.Fprintf(g.out, "  approve it as another admin: payctl --actor <another admin> requests approve %s\n", r.GetName())
	return nil
}

// printRequestOrJSON prints r, the request an action waits on when it
// needs a second admin's approval, else the action's answer msg as JSON.
func (g *globals) printRequestOrJSON(msg proto.Message, r *payschedv1.OperatorRequest) error {
	if r != nil {
		return g.printRequest(r)
	}
	return printJSON(g.out, msg)
}

func what(r *payschedv1.OperatorRequest) string {
	switch {
	case r.GetEndpointId() != "":
		return "endpoint " + r.GetEndpointId()
	case r.GetScheduleId() != "":
		return "schedule " + r.GetScheduleId()
	case r.GetTenant() != "":
		l := r.GetLimits()
		return fmt.Sprintf("tenant %s (weight %d, max in flight %d, max rate %g)", r.GetTenant(), l.GetWeight(), l.GetMaxInflight(), l.GetMaxRate())
	case r.GetPaymentCount() == 1 && len(r.GetPaymentIds()) == 1:
		return r.GetPaymentIds()[0]
	}
	return fmt.Sprintf("%d payments", r.GetPaymentCount())
}

func amounts(r *payschedv1.OperatorRequest) string {
	var out []string
	for _, a := range r.GetAmounts() {
		out = append(out, fmt.Sprintf("%d %s", a.GetTotal(), a.GetCurrency()))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

func expiresAt(r *payschedv1.OperatorRequest) string {
	if !r.GetExpiresAt().IsValid() {
		return "-"
	}
	return ts(r.GetExpiresAt())
}

func clipNote(s string) string {
	if len([]rune(s)) > 40 {
		return string([]rune(s)[:39]) + "…"
	}
	return s
}
