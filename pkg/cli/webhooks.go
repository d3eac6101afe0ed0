package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
)

// webhooksCmd manages tenants' webhook endpoints, and resends and
// recovers their deliveries (admin).
func webhooksCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "webhooks",
		Short: "Tenants' webhook endpoints: add, list, enable, disable, rotate the secret, resend, recover, the delivery log (admin)",
		Args:  cobra.NoArgs,
	}
	var types []string
	var desc string
	var maxInflight int32
	var perSecond float64
	add := &cobra.Command{
		Use:   "add TENANT URL",
		Short: "Register an endpoint; prints its signing secret once",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := call(g, true, func(c *conn) (*payschedv1.CreateWebhookEndpointResponse, error) {
				return c.admin.CreateWebhookEndpoint(c.ctx, &payschedv1.CreateWebhookEndpointRequest{Tenant: args[0], Url: args[1],
					EventTypes: types, Description: desc, MaxInflight: maxInflight, MaxPerSecond: perSecond})
			})
			if err != nil {
				return err
			}
			return printJSON(g.out, resp)
		},
	}
	add.Flags().StringSliceVar(&types, "type", nil, "event types to receive (repeat; default all), e.g. paysched.payment.completed")
	add.Flags().StringVar(&desc, "description", "", "free text")
	add.Flags().Int32Var(&maxInflight, "max-inflight", 0, "attempts under way at once (0: 4)")
	add.Flags().Float64Var(&perSecond, "max-per-second", 0, "attempts started a second per dispatcher: 1 to 10000 (0: 50)")
	var tenant string
	list := &cobra.Command{
		Use:   "list",
		Short: "List endpoints (of --tenant)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := call(g, true, func(c *conn) (*payschedv1.ListWebhookEndpointsResponse, error) {
				return c.admin.ListWebhookEndpoints(c.ctx, &payschedv1.ListWebhookEndpointsRequest{Tenant: tenant})
			})
			if err != nil {
				return err
			}
			return g.jsonOrTable(resp, "ENDPOINT\tTENANT\tURL\tTYPES\tENABLED\tFAILING SINCE\tDISABLED BECAUSE", func(w io.Writer) {
				for _, e := range resp.GetEndpoints() {
					since := ""
					if e.GetFailingSince() != nil {
						since = e.GetFailingSince().AsTime().Format(time.RFC3339)
					}
					ts := strings.Join(e.GetEventTypes(), ",")
					if ts == "" {
						ts = "all"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\t%s\n", e.GetEndpointId(), e.GetTenant(), e.GetUrl(), ts, e.GetEnabled(),
						since, e.GetDisabledReason())
				}
			})
		},
	}
	list.Flags().StringVar(&tenant, "tenant", "", "only this tenant's")
	enable := func(use string, on bool) *cobra.Command {
		return idCmd(g, use+" ENDPOINT", map[bool]string{true: "Enable an endpoint (its failure clock restarts)", false: "Disable an endpoint"}[on], true,
			func(c *conn, id string) (*payschedv1.SetWebhookEndpointEnabledResponse, error) {
				return c.admin.SetWebhookEndpointEnabled(c.ctx, &payschedv1.SetWebhookEndpointEnabledRequest{EndpointId: id, Enabled: on})
			},
			// Success is silent: the answer holds nothing to show.
			func(*payschedv1.SetWebhookEndpointEnabledResponse) error { return nil })
	}
	var overlap time.Duration
	rotate := idCmd(g, "rotate ENDPOINT",
		"Ask for an endpoint's new secret: a second admin's approval makes it (printed once to them); the old one signs beside it for --overlap", true,
		func(c *conn, id string) (*payschedv1.RotateWebhookSecretResponse, error) {
			return c.admin.RotateWebhookSecret(c.ctx, &payschedv1.RotateWebhookSecretRequest{EndpointId: id,
				OverlapSeconds: int64(overlap / time.Second)})
		},
		// A second admin's approval answers the new secret.
		func(resp *payschedv1.RotateWebhookSecretResponse) error {
			return g.printRequestOrJSON(resp, resp.GetRequest())
		})
	rotate.Flags().DurationVar(&overlap, "overlap", 24*time.Hour, "how long both secrets sign (up to 168h)")
	resend := &cobra.Command{
		Use:   "resend ENDPOINT WEBHOOK_ID",
		Short: "Deliver one message to one endpoint again, now",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := call(g, true, func(c *conn) (*payschedv1.ResendWebhookResponse, error) {
				return c.admin.ResendWebhook(c.ctx, &payschedv1.ResendWebhookRequest{EndpointId: args[0], WebhookId: args[1]})
			})
			return err
		},
	}
	var since, until string
	recov := &cobra.Command{
		Use:   "recover ENDPOINT --since TIME [--until TIME]",
		Short: "Deliver again every failed message of an endpoint noted since a time (RFC 3339, or a duration ago: 6h)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := timeArg("--since", since)
			if err != nil {
				return err
			}
			req := &payschedv1.RecoverWebhooksRequest{EndpointId: args[0], Since: timestamppb.New(s)}
			if until != "" {
				u, err := timeArg("--until", until)
				if err != nil {
					return err
				}
				req.Until = timestamppb.New(u)
			}
			resp, err := call(g, true, func(c *conn) (*payschedv1.RecoverWebhooksResponse, error) {
				return c.admin.RecoverWebhooks(c.ctx, req)
			})
			if err != nil {
				return err
			}
			return g.printRequestOrJSON(resp, resp.GetRequest())
		},
	}
	recov.Flags().StringVar(&since, "since", "", "RFC 3339 time, or a duration ago (6h)")
	recov.Flags().StringVar(&until, "until", "", "RFC 3339 time, or a duration ago (optional)")
	var payment, endpoint string
	var size int32
	logCmd := &cobra.Command{
		Use:   "log --payment ID | --endpoint ID",
		Short: "The delivery log of a payment or an endpoint, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := call(g, true, func(c *conn) (*payschedv1.ListWebhookAttemptsResponse, error) {
				return c.admin.ListWebhookAttempts(c.ctx, &payschedv1.ListWebhookAttemptsRequest{PaymentId: payment,
					EndpointId: endpoint, PageSize: size})
			})
			if err != nil {
				return err
			}
			return g.jsonOrTable(resp, "AT\tENDPOINT\tWEBHOOK ID\tTYPE\tATTEMPT\tSTATUS\tMS\tSTATE\tERROR", func(w io.Writer) {
				for _, a := range resp.GetAttempts() {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", a.GetAt().AsTime().Format(time.RFC3339), a.GetEndpointId(),
						a.GetWebhookId(), a.GetEventType(), a.GetAttempt(), a.GetStatus(), a.GetLatencyMs(), a.GetDeliveryState(), a.GetError())
				}
			})
		},
	}
	logCmd.Flags().StringVar(&payment, "payment", "", "a payment's deliveries")
	logCmd.Flags().StringVar(&endpoint, "endpoint", "", "an endpoint's deliveries")
	logCmd.Flags().Int32Var(&size, "limit", 50, "attempts (1..500)")
	c.AddCommand(add, list, enable("enable", true), enable("disable", false), rotate, resend, recov, logCmd)
	return c
}

// timeArg reads an RFC 3339 time or a duration before now.
func timeArg(flag, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("%s is required", flag)
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time (2026-12-06T00:00:00Z) or a duration ago (6h)", flag, s)
}
