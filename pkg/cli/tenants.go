package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
)

// tenantsCmd shows each tenant's due, in-flight and lateness, and sets
// its fair-claim limits (admin).
func tenantsCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "tenants",
		Short: "Show tenants' due, in flight and lateness with their weight and caps; set them (admin)",
		Args:  cobra.NoArgs,
	}
	var size int32
	list := &cobra.Command{
		Use:   "list",
		Short: "List tenants with due payments or limits set, in name order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenants, err := listAll(g, true, func(c *conn, after string) ([]*payschedv1.Tenant, string, error) {
				resp, err := c.admin.ListTenants(c.ctx, &payschedv1.ListTenantsRequest{PageSize: size, After: after})
				return resp.GetTenants(), resp.GetNextAfter(), err
			})
			if err != nil {
				return err
			}
			all := &payschedv1.ListTenantsResponse{Tenants: tenants}
			return g.jsonOrTable(all, "TENANT\tDUE\tIN FLIGHT\tLATENESS\tWEIGHT\tMAX IN FLIGHT\tMAX RATE\tSET BY", func(w io.Writer) {
				for _, t := range all.GetTenants() {
					l := t.GetLimits()
					fmt.Fprintf(w, "%s\t%d\t%d\t%.1fs\t%d\t%s\t%s\t%s\n", t.GetTenant(), t.GetDue(), t.GetInFlight(), t.GetLatenessSeconds(),
						l.GetWeight(), orDefault(float64(l.GetMaxInflight())), orDefault(l.GetMaxRate()), t.GetLimitsSetBy())
				}
			})
		},
	}
	list.Flags().Int32Var(&size, "page-size", 500, "page size")
	var weight, maxInflight int32
	var note string
	var maxRate float64
	set := &cobra.Command{
		Use:   "set TENANT",
		Short: "Ask to set a tenant's weight and caps (0: the sweepers' default): a second admin approves it (payctl requests approve)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := call(g, true, func(c *conn) (*payschedv1.SetTenantLimitsResponse, error) {
				return c.admin.SetTenantLimits(c.ctx, &payschedv1.SetTenantLimitsRequest{Tenant: args[0],
					Limits: &payschedv1.TenantLimits{Weight: weight, MaxInflight: maxInflight, MaxRate: maxRate}, Note: note})
			})
			if err != nil {
				return err
			}
			// A limit change always waits for a second admin.
			return g.printRequest(resp.GetRequest())
		},
	}
	set.Flags().StringVar(&note, "note", "", "why, for the approver and the record")
	set.Flags().Int32Var(&weight, "weight", 1, "share of each claim round relative to other tenants' (1..1000)")
	set.Flags().Int32Var(&maxInflight, "max-inflight", 0, "payments in flight for it across sweepers (0: the sweepers' --tenant-max-inflight)")
	set.Flags().Float64Var(&maxRate, "max-rate", 0, "claims per second across sweepers (0: the sweepers' --tenant-max-rate)")
	c.AddCommand(list, set)
	return c
}

func orDefault(v float64) string {
	if v == 0 {
		return "default"
	}
	return fmt.Sprintf("%g", v)
}
