// Command demo is `make demo`'s driver: it schedules payments due within
// seconds against the running local stack, with gateway faults, shows them
// execute live and checks the books. It exits 1 when a money invariant fails.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/tools/demo"
)

func main() {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	o := demo.Options{Out: os.Stdout}
	fs.StringVar(&o.API, "api-grpc", "127.0.0.1:9090", "payments-api gRPC address")
	fs.StringVar(&o.AdminAPI, "admin-api-grpc", "127.0.0.1:9091", "admin-api gRPC address (the reconciliation run at the end)")
	secret := fs.String("jwt-secret", auth.DevSecret, "local HS256 secret")
	secretFile := fs.String("jwt-secret-file", "", "file holding the local HS256 secret, instead of --jwt-secret (the local stack's: .data/secrets/jwt-secret)")
	fs.StringVar(&o.Issuer, "jwt-issuer", auth.DefaultIssuer, "token issuer")
	fs.StringVar(&o.Audience, "jwt-audience", auth.DefaultAudience, "token audience")
	fs.IntVar(&o.N, "n", 2000, "payments to schedule")
	fs.DurationVar(&o.Within, "within", 30*time.Second, "spread of due times")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up waiting after this (0: what the faults and the money rules' waits allow, printed at the start)")
	fs.DurationVar(&o.MaxRequest, "gateway-max-request", time.Minute, "the stack's --gateway-max-request (the local stack's: in .data/env): a lost answer counts as not charged only this long after")
	backoff := fs.String("executor-backoff", "2s,4s,8s,16s,32s", "the executors' --backoff (the local stack's: in .data/env)")
	fs.Float64Var(&o.Unavailable, "unavailable-rate", 0.05, "injected: gateway answers UNAVAILABLE (retried with backoff)")
	fs.Float64Var(&o.Lost, "timeout-after-commit-rate", 0.03, "injected: gateway charges, then the answer is lost (settled by a probe)")
	fs.StringVar(&o.Gateway, "gateway-addr", "127.0.0.1:9300", "gateway-sim address")
	fs.StringVar(&o.GatewayCAFile, "gateway-ca-file", "", "CA of gateway-sim's TLS certificate (the local stack's: .data/tls/ca.pem)")
	fs.StringVar(&o.GatewayTokenFile, "gateway-token-file", "", "gateway-sim's bearer token file (the local stack's: .data/tls/gateway-sim-token)")
	fs.StringVar(&o.GatewayCertFile, "gateway-cert-file", "", "client certificate presented to gateway-sim (the local stack's: .data/tls/operator.pem)")
	fs.StringVar(&o.GatewayKeyFile, "gateway-key-file", "", "private key of --gateway-cert-file")
	fs.StringVar(&o.DatabaseURL, "database-url", "postgres://postgres@127.0.0.1:55432/paysched?sslmode=disable", "the stack's database, read for the live view")
	fs.StringVar(&o.AuditDatabaseURL, "audit-database-url", "", "the audit log's database (empty: --database-url)")
	fs.StringVar(&o.Brokers, "kafka-brokers", "127.0.0.1:9092", "Kafka brokers")
	fs.StringVar(&o.ConsoleURL, "console-url", "http://127.0.0.1:8081/console/", "the operator console, printed to watch the run there")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	o.Secret = *secret
	if *secretFile != "" {
		s, err := config.ReadSecret(*secretFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo: --jwt-secret-file:", err)
			os.Exit(2)
		}
		o.Secret = s
	}
	if o.N <= 0 || o.Within <= 0 || o.Timeout < 0 || o.MaxRequest <= 0 {
		fmt.Fprintln(os.Stderr, "demo: --n, --within and --gateway-max-request must be positive, --timeout not negative")
		os.Exit(2)
	}
	b, err := payment.ParseBackoff(*backoff)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: --executor-backoff:", err)
		os.Exit(2)
	}
	o.Backoff = b
	if err := demo.Run(o); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
