package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway/dial"
)

func gatewayCmd(g *globals) *cobra.Command {
	gw := &dial.Flags{Kind: dial.KindGRPC}
	c := &cobra.Command{Use: "gateway", Short: "Talk to gateway-sim: report, faults"}
	c.PersistentFlags().StringVar(&gw.Addr, "gateway", env("gateway-addr", "127.0.0.1:9300"), "gateway-sim address (env PAYSCHED_GATEWAY_ADDR)")
	c.PersistentFlags().StringVar(&gw.CAFile, "gateway-ca-file", env("gateway-ca-file", ""), "CA of gateway-sim's TLS certificate (env PAYSCHED_GATEWAY_CA_FILE)")
	c.PersistentFlags().StringVar(&gw.CertFile, "gateway-cert-file", env("gateway-cert-file", ""), "client certificate presented to gateway-sim, mutual TLS (env PAYSCHED_GATEWAY_CERT_FILE)")
	c.PersistentFlags().StringVar(&gw.KeyFile, "gateway-key-file", env("gateway-key-file", ""), "private key of --gateway-cert-file (env PAYSCHED_GATEWAY_KEY_FILE)")
	c.PersistentFlags().StringVar(&gw.TokenFile, "gateway-token-file", env("gateway-token-file", ""), "gateway-sim's bearer token file (env PAYSCHED_GATEWAY_TOKEN_FILE)")
	report := &cobra.Command{
		Use:   "report",
		Short: "Charges and double charges (references charged more than once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := gatewayCall(g, gw, func(ctx context.Context, cl gatewayv1.GatewayAdminServiceClient) (*gatewayv1.ReportResponse, error) {
				return cl.Report(ctx, &gatewayv1.ReportRequest{})
			})
			if err != nil {
				return err
			}
			doubles := r.GetDoubleCharged()
			if doubles == nil {
				doubles = []string{}
			}
			if g.json {
				return printJSONMap(g.out, map[string]any{
					"charges": r.GetCharges(), "succeeded": r.GetSucceeded(), "double_charged": doubles,
					"rate_limited": r.GetRateLimited(), "max_charges_per_second": r.GetMaxChargesPerSecond(),
				})
			}
			fmt.Fprintf(g.out, "charges=%d succeeded=%d double_charged=%d rate_limited=%d max_charges_per_second=%d\n",
				r.GetCharges(), r.GetSucceeded(), len(r.GetDoubleCharged()), r.GetRateLimited(), r.GetMaxChargesPerSecond())
			for _, ref := range r.GetDoubleCharged() {
				fmt.Fprintln(g.out, "  double charged:", ref)
			}
			return nil
		},
	}
	f := &gatewayv1.Faults{}
	var latMin, latMax int32
	faults := &cobra.Command{
		Use:   "faults",
		Short: "Replace gateway-sim's faults (flags not given are zero)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.LatencyMinMs, f.LatencyMaxMs = latMin, latMax
			r, err := gatewayCall(g, gw, func(ctx context.Context, cl gatewayv1.GatewayAdminServiceClient) (*gatewayv1.SetFaultsResponse, error) {
				return cl.SetFaults(ctx, &gatewayv1.SetFaultsRequest{Faults: f})
			})
			if err != nil {
				return err
			}
			return printJSON(g.out, r.GetFaults())
		},
	}
	ff := faults.Flags()
	ff.Int32Var(&latMin, "latency-min-ms", 0, "added latency, lower bound")
	ff.Int32Var(&latMax, "latency-max-ms", 0, "added latency, upper bound")
	ff.Float64Var(&f.DeclineRate, "decline-rate", 0, "fraction declined")
	ff.Float64Var(&f.UnavailableRate, "unavailable-rate", 0, "fraction UNAVAILABLE")
	ff.Float64Var(&f.TimeoutAfterCommitRate, "timeout-after-commit-rate", 0, "fraction recorded but answered DEADLINE_EXCEEDED")
	ff.Float64Var(&f.RateCeiling, "rate-ceiling", 0, "charges per second (0: none)")
	ff.BoolVar(&f.Outage, "outage", false, "answer everything UNAVAILABLE")
	c.AddCommand(report, faults)
	return c
}

// gatewayCall dials gateway-sim, makes one call with its admin client and
// closes the connection; a failed call reads as payctl's other calls do
// (RPCError).
func gatewayCall[R any](g *globals, gw *dial.Flags, rpc func(ctx context.Context, cl gatewayv1.GatewayAdminServiceClient) (R, error)) (R, error) {
	var none R
	if err := gw.Validate(); err != nil {
		return none, err
	}
	cc, err := gw.DialGRPC()
	if err != nil {
		return none, err
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	r, err := rpc(ctx, gatewayv1.NewGatewayAdminServiceClient(cc))
	if err != nil {
		return none, RPCError(err)
	}
	return r, nil
}
