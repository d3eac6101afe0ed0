package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
)

// Admin commands send --token, or mint a local token with the admin store.

func deadLettersCmd(g *globals) *cobra.Command {
	var size int32
	c := &cobra.Command{
		Use:   "dead-letters",
		Short: "List dead-lettered payments with their reason and attempts (admin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			letters, err := listAll(g, true, func(c *conn, tok string) ([]*payschedv1.DeadLetter, string, error) {
				resp, err := c.admin.ListDeadLetters(c.ctx, &payschedv1.ListDeadLettersRequest{PageSize: size, PageToken: tok})
				return resp.GetDeadLetters(), resp.GetNextPageToken(), err
			})
			if err != nil {
				return err
			}
			all := &payschedv1.ListDeadLettersResponse{DeadLetters: letters}
			return g.jsonOrTable(all, "PAYMENT ID\tPAYER\tAMOUNT\tDUE AT\tREASON\tATTEMPTS\tLAST ERROR", func(w io.Writer) {
				for _, d := range all.GetDeadLetters() {
					p := d.GetPayment()
					var outs []string
					for _, a := range p.GetAttempts() {
						outs = append(outs, a.GetOutcome())
					}
					fmt.Fprintf(w, "%s\t%s\t%d %s\t%s\t%s\t%s\t%s\n", p.GetPaymentId(), p.GetPayer(), p.GetAmount(), p.GetCurrency(),
						ts(p.GetDueAt()), d.GetReason(), strings.Join(outs, ","), p.GetLastError())
				}
			})
		},
	}
	c.Flags().Int32Var(&size, "page-size", 200, "page size")
	return c
}

// noteMove is an AdminService method that moves one payment with a note.
type noteMove func(c *conn, id, note string) (paymentAnswer, error)

// paymentAnswer is the answer of a call that moves one payment.
type paymentAnswer interface {
	proto.Message
	GetPayment() *payschedv1.ScheduledPayment
}

// moveBy calls an AdminService method whose request is a payment id and a
// note and whose answer carries the payment.
func moveBy[Req any, Resp paymentAnswer](call func(payschedv1.AdminServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	req func(id, note string) Req) noteMove {
	return func(c *conn, id, note string) (paymentAnswer, error) {
		return call(c.admin, c.ctx, req(id, note))
	}
}

// operatorMoves are payctl's one-payment operator commands: each sends the
// payment id and --note to its AdminService method.
var operatorMoves = []struct {
	use, short, noteHelp string
	call                 noteMove
}{
	{"redrive PAYMENT_ID", "Move a dead letter back to PENDING with a fresh budget and the same gateway key (admin)", "why, for the audit trail",
		moveBy(payschedv1.AdminServiceClient.RedrivePayment, func(id, note string) *payschedv1.RedrivePaymentRequest {
			return &payschedv1.RedrivePaymentRequest{PaymentId: id, Note: note}
		})},
	{"resolve PAYMENT_ID --note TEXT", "Move a dead letter to FAILED with an operator note (admin)", "why (required)",
		moveBy(payschedv1.AdminServiceClient.ResolvePayment, func(id, note string) *payschedv1.ResolvePaymentRequest {
			return &payschedv1.ResolvePaymentRequest{PaymentId: id, Note: note}
		})},
	{"abandon PAYMENT_ID --note TEXT", "Cancel a payment at rest (a dead letter, HELD, or PENDING) as an operator: its undecided charge at the gateway is cancelled first (admin)", "why (required)",
		moveBy(payschedv1.AdminServiceClient.CancelPayment, func(id, note string) *payschedv1.CancelPaymentRequest {
			return &payschedv1.CancelPaymentRequest{PaymentId: id, Note: note}
		})},
	{"hold PAYMENT_ID --note TEXT", "Stop a PENDING payment: the sweepers skip it until it is released or abandoned (admin)", "why (required)",
		moveBy(payschedv1.AdminServiceClient.HoldPayment, func(id, note string) *payschedv1.HoldPaymentRequest {
			return &payschedv1.HoldPaymentRequest{PaymentId: id, Note: note}
		})},
	{"release PAYMENT_ID", "Move a HELD payment back to PENDING, its run time as it was (admin)", "why, for the audit trail",
		moveBy(payschedv1.AdminServiceClient.ReleasePayment, func(id, note string) *payschedv1.ReleasePaymentRequest {
			return &payschedv1.ReleasePaymentRequest{PaymentId: id, Note: note}
		})},
	{"run-now PAYMENT_ID --note TEXT", "Make a PENDING payment waiting past its due time (a backoff, a reschedule) due at once (admin)", "why (required)",
		moveBy(payschedv1.AdminServiceClient.RunPaymentNow, func(id, note string) *payschedv1.RunPaymentNowRequest {
			return &payschedv1.RunPaymentNowRequest{PaymentId: id, Note: note}
		})},
}

// operatorMoveCmds are the commands of operatorMoves.
func operatorMoveCmds(g *globals) []*cobra.Command {
	var cmds []*cobra.Command
	for _, m := range operatorMoves {
		cmds = append(cmds, moveCmd(g, m.use, m.short, m.noteHelp, m.call))
	}
	return cmds
}

func rescheduleCmd(g *globals) *cobra.Command {
	var at string
	c := moveCmd(g, "reschedule PAYMENT_ID --at TIME --note TEXT",
		"Move when a PENDING or HELD payment runs: never before its due time, at most 90 days ahead (admin)",
		"why (required)", func(c *conn, id, note string) (paymentAnswer, error) {
			when, err := parseDue(at)
			if err != nil {
				return nil, fmt.Errorf("--at: %w", err)
			}
			return c.admin.ReschedulePayment(c.ctx, &payschedv1.ReschedulePaymentRequest{PaymentId: id, RunAt: timestamppb.New(when), Note: note})
		})
	c.Flags().StringVar(&at, "at", "", "when it runs: RFC 3339, or a duration from now such as +2h")
	return c
}

// moveCmd is an operator action on one payment at rest, with a --note.
func moveCmd(g *globals, use, short, noteHelp string, move noteMove) *cobra.Command {
	var note string
	c := idCmd(g, use, short, true, func(c *conn, id string) (paymentAnswer, error) { return move(c, id, note) },
		func(resp paymentAnswer) error {
			if r, ok := resp.(requestAnswer); ok && r.GetRequest() != nil {
				return g.printRequest(r.GetRequest())
			}
			return g.printPayments(resp, resp.GetPayment())
		})
	c.Flags().StringVar(&note, "note", "", noteHelp)
	return c
}

func reconcileCmd(g *globals) *cobra.Command {
	var day string
	c := &cobra.Command{
		Use:   "reconcile [--day YYYY-MM-DD]",
		Short: "Reconcile a UTC day against the gateway's settlement report now (admin; default yesterday)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A big day takes a while: the run is one transaction on the server.
			resp, err := callFor(g, true, max(g.timeout, 10*time.Minute), func(c *conn) (*payschedv1.TriggerReconciliationRunResponse, error) {
				return c.admin.TriggerReconciliationRun(c.ctx, &payschedv1.TriggerReconciliationRunRequest{Day: day})
			})
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(g.out, resp.GetRun())
			}
			return g.printRuns(resp.GetRun())
		},
	}
	c.Flags().StringVar(&day, "day", "", "UTC day, YYYY-MM-DD (default: yesterday)")
	return c
}

func runsCmd(g *globals) *cobra.Command {
	var day string
	var size int32
	c := &cobra.Command{
		Use:   "runs [--day YYYY-MM-DD]",
		Short: "List reconciliation runs, newest first, with their items (admin)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := call(g, true, func(c *conn) (*payschedv1.ListReconciliationRunsResponse, error) {
				return c.admin.ListReconciliationRuns(c.ctx, &payschedv1.ListReconciliationRunsRequest{Day: day, PageSize: size})
			})
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(g.out, resp)
			}
			return g.printRuns(resp.GetRuns()...)
		},
	}
	c.Flags().StringVar(&day, "day", "", "only this UTC day")
	c.Flags().Int32Var(&size, "page-size", 20, "runs to show")
	return c
}

func (g *globals) printRuns(runs ...*payschedv1.ReconciliationRun) error {
	if err := g.table("RUN\tDAY\tSTATE\tBY\tCHARGES\tPAYMENTS\tREPAIRED\tMISMATCHES\tSECONDS", func(w io.Writer) {
		for _, r := range runs {
			secs := ""
			if r.GetFinishedAt() != nil {
				secs = fmt.Sprintf("%.2f", r.GetFinishedAt().AsTime().Sub(r.GetStartedAt().AsTime()).Seconds())
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.GetRunId(), r.GetDay(), r.GetState(), r.GetTriggeredBy(),
				r.GetCharges(), r.GetPayments(), r.GetRepaired(), r.GetMismatches(), secs)
		}
	}); err != nil {
		return err
	}
	for _, r := range runs {
		if r.GetError() != "" {
			fmt.Fprintf(g.out, "run %d failed: %s\n", r.GetRunId(), r.GetError())
		}
		for _, it := range r.GetItems() {
			fmt.Fprintf(g.out, "  run %d  %-9s %-18s payment=%s charges=%s  %s\n", r.GetRunId(), it.GetSeverity(), it.GetKind(),
				it.GetPaymentId(), strings.Join(it.GetChargeIds(), ","), it.GetDetail())
		}
	}
	return nil
}
