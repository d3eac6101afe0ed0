package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/auth"
)

// demoCmd schedules a burst of payments against the running stack, shows
// them execute, and checks the money invariants at the end.
func demoCmd(g *globals) *cobra.Command {
	var n int
	var within, timeout time.Duration
	var gwAddr string
	c := &cobra.Command{
		Use:   "demo",
		Short: "Schedule a few hundred payments due within seconds and watch them execute",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			actor := "demo-" + time.Now().UTC().Format("150405")
			tok, err := auth.Mint([]byte(g.secret), g.issuer, g.audience, actor, false, time.Hour)
			if err != nil {
				return err
			}
			cc, err := grpc.NewClient(g.api, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer cc.Close()
			gc, err := grpc.NewClient(gwAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return err
			}
			defer gc.Close()
			api := payschedv1.NewPaymentsServiceClient(cc)
			gw := gatewayv1.NewGatewayAdminServiceClient(gc)
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
			before, err := gw.Report(ctx, &gatewayv1.ReportRequest{})
			if err != nil {
				return fmt.Errorf("gateway report: %w", rpcError(err))
			}

			start := time.Now().Add(2 * time.Second)
			var items []*payschedv1.CreateScheduledPaymentRequest
			for i := range n {
				payee := fmt.Sprintf("merchant-%03d", i%50)
				if i%20 == 7 {
					payee = "decline-" + payee // declined by rule: FAILED
				}
				due := start.Add(time.Duration(i) * within / time.Duration(max(n, 1)))
				items = append(items, &payschedv1.CreateScheduledPaymentRequest{Payee: payee, Amount: int64(500 + 37*i),
					Currency: "USD", DueAt: timestamppb.New(due), RequestId: uuid.NewString(), Description: "paysched demo"})
			}
			for i := 0; i < len(items); i += 1000 {
				resp, err := api.BatchCreateScheduledPayments(ctx, &payschedv1.BatchCreateScheduledPaymentsRequest{Items: items[i:min(len(items), i+1000)]})
				if err != nil {
					return fmt.Errorf("schedule: %w", rpcError(err))
				}
				for _, r := range resp.GetResults() {
					if r.GetOutcome() == payschedv1.BatchCreateResult_OUTCOME_REJECTED {
						return fmt.Errorf("item %d rejected: %s %s", r.GetIndex(), r.GetReason(), r.GetMessage())
					}
				}
			}
			fmt.Fprintf(g.out, "scheduled %d payments for %s, due over the next %s\n", n, actor, within+2*time.Second)
			deadline := time.Now().Add(timeout)
			var counts map[string]int
			var mine []*payschedv1.ScheduledPayment
			for {
				mine, err = listAll(ctx, api)
				if err != nil {
					return err
				}
				counts = map[string]int{}
				for _, p := range mine {
					counts[p.GetStatus().String()]++
				}
				if err != nil {
					return err
				}
				open := counts["PENDING"] + counts["PROCESSING"]
				fmt.Fprintf(g.out, "t=%4.1fs  pending=%d processing=%d completed=%d failed=%d dead_lettered=%d\n",
					time.Since(start).Seconds(), counts["PENDING"], counts["PROCESSING"], counts["COMPLETED"], counts["FAILED"], counts["DEAD_LETTERED"])
				if open == 0 {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%d payments still open after %s: is the engine running (make up)?", open, timeout)
				}
				time.Sleep(time.Second)
			}
			after, err := gw.Report(ctx, &gatewayv1.ReportRequest{})
			if err != nil {
				return fmt.Errorf("gateway report: %w", rpcError(err))
			}
			// Ask the gateway about every payment of this run: a COMPLETED one
			// must have exactly its settled charge, anything else none.
			charges := gatewayv1.NewGatewayServiceClient(gc)
			charged, mismatched := 0, 0
			for _, p := range mine {
				got, err := charges.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: p.GetPaymentId()})
				succeeded := err == nil && got.GetCharge().GetStatus() == gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED
				if succeeded {
					charged++
				}
				completed := p.GetStatus() == payschedv1.PaymentStatus_COMPLETED
				if succeeded != completed || (succeeded && got.GetCharge().GetAmount() != p.GetAmount()) {
					mismatched++
				}
			}
			fmt.Fprintf(g.out, "\nsummary: completed=%d failed=%d dead_lettered=%d cancelled=%d\n",
				counts["COMPLETED"], counts["FAILED"], counts["DEAD_LETTERED"], counts["CANCELLED"])
			fmt.Fprintf(g.out, "gateway: charges for this run=%d (completed payments=%d), mismatches=%d, double charged (all time)=%d, charges (all time)=%d->%d\n",
				charged, counts["COMPLETED"], mismatched, len(after.GetDoubleCharged()), before.GetSucceeded(), after.GetSucceeded())
			if len(after.GetDoubleCharged()) > 0 || mismatched > 0 {
				return fmt.Errorf("money invariant violated: charges=%d completed=%d mismatched=%d double_charged=%v",
					charged, counts["COMPLETED"], mismatched, after.GetDoubleCharged())
			}
			fmt.Fprintln(g.out, "money invariants hold")
			return nil
		},
	}
	c.Flags().IntVar(&n, "n", 300, "payments to schedule")
	c.Flags().DurationVar(&within, "within", 5*time.Second, "spread of due times")
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this")
	c.Flags().StringVar(&gwAddr, "gateway", env("gateway-addr", "127.0.0.1:9300"), "gateway-sim address")
	return c
}

// listAll pages through the caller's payments.
func listAll(ctx context.Context, api payschedv1.PaymentsServiceClient) ([]*payschedv1.ScheduledPayment, error) {
	var out []*payschedv1.ScheduledPayment
	cursor := ""
	for {
		resp, err := api.ListScheduledPayments(ctx, &payschedv1.ListScheduledPaymentsRequest{PageSize: 500, Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("list: %w", rpcError(err))
		}
		out = append(out, resp.GetPayments()...)
		if cursor = resp.GetNextCursor(); cursor == "" {
			return out, nil
		}
	}
}
