// Command admin-api serves the operators' API: AdminService (dead letters,
// re-drive, resolve, cancel, reconciliation runs) over gRPC on --grpc-addr
// and REST (grpc-gateway) on --http-addr. It is apart from payments-api,
// the internet's door: its own process, database role (paysched_admin),
// gateway certificate (read and cancel only) and listeners, never routed
// by a public Ingress, and it accepts only admin tokens.
package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/pkg/console"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/services/admin-api/adminserver"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "admin-api", DatabaseUsage: "Postgres URL (the paysched_admin role's user)",
		HTTPAddr: "127.0.0.1:8081", HTTPUsage: "REST listen address (/v1/admin/...)"})
	dbConns := cmd.Int("db-max-conns", 8, "database pool size")
	metricsAddr := cmd.String("metrics-addr", "127.0.0.1:9191", "/metrics and /healthz listen address: internal, apart from the API's ports")
	grpcAddr := cmd.String("grpc-addr", "127.0.0.1:9091", "gRPC listen address (AdminService)")
	tokens := auth.RegisterFlags(cmd.FlagSet, true)
	gwf := dial.Register(cmd.FlagSet, "127.0.0.1:9300") // operators' moves ask it first; an empty --gateway-addr turns that off
	opRate := cmd.Float64("actor-rate", 20, "requests per second allowed to one operator (per instance); 0 disables the limit")
	opBurst := cmd.Int("actor-burst", 40, "requests one operator may send at once after being idle")
	cons := console.RegisterFlags(cmd.FlagSet)
	four := approval.RegisterFlags(cmd.FlagSet)
	hooksURL := cmd.String("webhooks-database-url", "", "the webhooks' database (migrate --webhooks-database-url): endpoints, deliveries and their log; empty: the tables are in --database-url")
	auditURL := cmd.String("audit-database-url", "", "the audit log's database (the console shows a payment's history from it); empty: not shown")
	cmd.Main(func(ctx context.Context, log *slog.Logger) error {
		if gwf.Kind == dial.KindGRPC && gwf.Addr == "" {
			gwf = nil
		} else if err := gwf.ValidateFor(cmd.Mode); err != nil {
			return err
		}
		authCfg, err := tokens.Config(cmd.Mode)
		if err != nil {
			return err
		}
		if *hooksURL != "" {
			if err := cmd.DatabaseURL("--webhooks-database-url", *hooksURL); err != nil {
				return err
			}
		}
		if *auditURL != "" {
			if err := cmd.DatabaseURL("--audit-database-url", *auditURL); err != nil {
				return err
			}
		}
		policy, err := four.Policy(cmd.Dev)
		if err != nil {
			return err
		}
		if policy.Relaxed() {
			log.Warn("four eyes relaxed (--approval-single): one admin may move money alone; development only", "single", fmt.Sprint(policy.Single))
		}
		consoleCfg, err := cons.Config(cmd.Mode)
		if err != nil {
			return err
		}
		if consoleCfg == nil {
			log.Info("the operator console is not served: production needs --console-oidc-issuer (--console=false turns it off)")
		}
		cfg := adminserver.Config{
			DatabaseURL: *cmd.DB, DBMaxConns: int32(*dbConns), Auth: authCfg, Gateway: gwf,
			RateLimit: ratelimit.Config{Rate: *opRate, Burst: *opBurst}, Reflection: cmd.Dev, LoopbackWebhooks: cmd.Dev,
			Console: consoleCfg, AuditDatabaseURL: *auditURL, WebhooksDatabaseURL: *hooksURL, Approval: policy,
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		l, err := server.Listen(*grpcAddr, *cmd.HTTPAddr, *metricsAddr)
		if err != nil {
			return err
		}
		srv, err := adminserver.New(ctx, cfg, log)
		if err != nil {
			l.Close()
			return err
		}
		return srv.Serve(ctx, l)
	})
}
