// Command gateway-sim stands in for the payment gateway: gateway.v1 with an
// exact idempotent ledger (Postgres, or memory for benchmarks) and fault
// injection set by flags and changed at runtime through GatewayAdminService.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway/gatewayhook"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/mtls"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/pkg/store/schema"
	"github.com/paysched/paysched/tools/gatewaysim"
)

func main() {
	fs := flag.NewFlagSet("gateway-sim", flag.ExitOnError)
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:9300", "gRPC listen address")
	httpAddr := fs.String("http-addr", "127.0.0.1:9301", "metrics and health listen address")
	ledger := fs.String("ledger", "postgres", "ledger: postgres (durable) or memory (benchmarks)")
	dbURL := fs.String("gateway-database-url", "postgres://postgres@127.0.0.1:55432/paysched_gateway?sslmode=disable", "gateway-sim's own database (created if missing)")
	f := &gatewayv1.Faults{}
	latMin := fs.Int("latency-min-ms", 0, "added latency, lower bound")
	latMax := fs.Int("latency-max-ms", 0, "added latency, upper bound")
	fs.Float64Var(&f.DeclineRate, "decline-rate", 0, "fraction of charges declined")
	fs.Float64Var(&f.UnavailableRate, "unavailable-rate", 0, "fraction of calls answered UNAVAILABLE")
	fs.Float64Var(&f.TimeoutAfterCommitRate, "timeout-after-commit-rate", 0, "fraction of charges recorded whose answer is lost")
	fs.Float64Var(&f.RateCeiling, "rate-ceiling", 0, "charges per second before RESOURCE_EXHAUSTED (0: none)")
	fs.BoolVar(&f.Outage, "outage", false, "answer every call UNAVAILABLE")
	fs.Float64Var(&f.UnavailableAfterCommitRate, "unavailable-after-commit-rate", 0, "fraction of charges recorded, then answered UNAVAILABLE (a connection dropped after sending)")
	keyRetention := fs.Duration("key-retention", 0, "forget idempotency keys after this, like a real PSP (0: never); a repeated key after it is a new charge")
	probeLag := fs.Duration("probe-lag", 0, "a new charge stays invisible to GetCharge's lookup by key this long, as Stripe's Search index lags (a listing of the payer's charges still finds it, and proves absences)")
	fs.Float64Var(&f.ProbeUnavailableRate, "probe-unavailable-rate", 0, "fraction of GetCharge calls answered UNAVAILABLE")
	fs.Float64Var(&f.ProbeUnprovenRate, "probe-unproven-rate", 0, "fraction of GetCharge misses whose listing fails: NOT_FOUND without the proof of absence")
	fs.Float64Var(&f.PoisonRate, "poison-rate", 0, "fraction of decline reasons and error messages spoiled with a NUL byte and invalid UTF-8")
	fs.Float64Var(&f.ActionRequiredRate, "action-required-rate", 0, "fraction of charges held undecided for the customer's authentication until cancelled (also every payee starting "+gatewaysim.ActionPrefix+")")
	fs.Float64Var(&f.ProcessingRate, "processing-rate", 0, "fraction of charges held undecided (processing) for --processing-time, then succeeded")
	processing := fs.Duration("processing-time", 10*time.Second, "how long a processing charge stays undecided")
	fs.Float64Var(&f.SlowRate, "slow-rate", 0, "fraction of charges that take --slow-time instead of the added latency")
	slow := fs.Duration("slow-time", 5*time.Second, "how long a slow charge takes (--slow-rate)")
	lateRecord := fs.Duration("late-record", 0, "make a charge whose caller gave up (timed out, or its stream ended) anyway, this long after its request arrived, as a PSP finishes a request its client left (0: never); the engine's --gateway-max-request must not be shorter")
	outagePrefix := fs.String("payee-outage-prefix", "", "answer UNAVAILABLE (not charged) to charges for payees with this prefix, until --payee-outage-until")
	outageUntil := fs.String("payee-outage-until", "", "end of the payee outage (RFC 3339)")
	hookURL := fs.String("webhook-url", "", "deliver charge-outcome webhooks here (off when empty)")
	hookSecret := config.SecretVar(fs, "webhook-secret", "HMAC-SHA256 secret signing the webhooks")
	serverTLS := mtls.RegisterServer(fs, gatewaysim.DefaultClients)
	tokenFile := fs.String("token-file", "", "file holding the bearer token every call must carry (needs TLS)")
	linger := fs.Duration("answer-linger", 2*time.Millisecond, "how long a Charges stream's answers wait for others to share their message (0-100ms)")
	svc.Main("gateway-sim", fs, func(ctx context.Context, log *slog.Logger) error {
		f.LatencyMinMs, f.LatencyMaxMs = int32(*latMin), int32(*latMax)
		if *keyRetention < 0 {
			return fmt.Errorf("--key-retention must not be negative, got %s", *keyRetention)
		}
		f.KeyRetentionMs = keyRetention.Milliseconds()
		if *probeLag < 0 || *processing < 0 || *lateRecord < 0 || *slow < 0 {
			return fmt.Errorf("--probe-lag, --processing-time, --late-record and --slow-time must not be negative, got %s, %s, %s and %s",
				*probeLag, *processing, *lateRecord, *slow)
		}
		f.ProbeLagMs, f.ProcessingMs, f.LateRecordMs, f.SlowMs = probeLag.Milliseconds(), processing.Milliseconds(), lateRecord.Milliseconds(), slow.Milliseconds()
		for name, v := range map[string]float64{"--probe-unavailable-rate": f.ProbeUnavailableRate, "--probe-unproven-rate": f.ProbeUnprovenRate,
			"--poison-rate": f.PoisonRate, "--action-required-rate": f.ActionRequiredRate, "--processing-rate": f.ProcessingRate,
			"--slow-rate": f.SlowRate} {
			if v < 0 || v > 1 {
				return fmt.Errorf("%s must be in [0, 1], got %g", name, v)
			}
		}
		var l gatewaysim.Ledger
		switch *ledger {
		case "memory":
			// Every charge stays in memory (a million is more than the
			// services' default soft limit): no limit for the simulator.
			debug.SetMemoryLimit(math.MaxInt64)
			l = gatewaysim.NewMemLedger()
		case "postgres":
			if err := schema.CreateDatabase(ctx, *dbURL); err != nil {
				return err
			}
			pool, err := svc.Pool(ctx, *dbURL, 32)
			if err != nil {
				return err
			}
			defer pool.Close()
			if l, err = gatewaysim.NewPGLedger(ctx, pool); err != nil {
				return err
			}
		default:
			return fmt.Errorf("--ledger %q: want postgres or memory", *ledger)
		}
		if *linger < 0 || *linger > 100*time.Millisecond {
			return fmt.Errorf("--answer-linger must be between 0 and 100ms, got %s", *linger)
		}
		sim := gatewaysim.New(l, f)
		sim.Linger = *linger
		if *outagePrefix != "" {
			until, err := time.Parse(time.RFC3339Nano, *outageUntil)
			if err != nil {
				return fmt.Errorf("--payee-outage-until: want an RFC 3339 time, got %q", *outageUntil)
			}
			sim.PayeeOutage = gatewaysim.Outage{Prefix: *outagePrefix, Until: until}
		}
		if *hookURL != "" {
			secret, err := hookSecret.Read()
			if err != nil {
				return err
			}
			if secret == "" {
				return fmt.Errorf("--webhook-url needs --webhook-secret or --webhook-secret-file")
			}
			sender := &gatewayhook.Sender{URL: *hookURL, Secret: []byte(secret), Log: log}
			sender.Start(ctx, 4)
			sim.OnCharge = func(c *gatewaysim.Charge) { sender.Enqueue(gatewaysim.Event(c)) }
		}
		opts := []grpc.ServerOption{grpc.NumStreamWorkers(uint32(4 * runtime.NumCPU())),
			tracing.ServerOption()}
		sec, err := gatewaysim.ServerOptions(serverTLS, *tokenFile)
		if err != nil {
			return err
		}
		opts = append(opts, sec...)
		gs := grpc.NewServer(svc.GRPCServerOptions(opts...)...)
		gatewayv1.RegisterGatewayServiceServer(gs, sim)
		gatewayv1.RegisterGatewayAdminServiceServer(gs, sim)
		return svc.Server{Name: "gateway-sim", Log: log, Registry: obs.Registry(), GRPC: gs, Reflection: true,
			GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr}.Run(ctx, nil)
	})
}
