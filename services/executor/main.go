// Command executor serves ExecutorService: it charges claimed payments
// through the gateway, asking first when an earlier attempt may have
// charged, and records every outcome, fenced by attempt.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	internalv1 "github.com/paysched/paysched/gen/paysched/internalv1"
	"github.com/paysched/paysched/pkg/engine/executor"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/mtls"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/svc"
	"github.com/paysched/paysched/pkg/platform/tracing"
	"github.com/paysched/paysched/pkg/store"
)

func main() {
	cmd := svc.NewCommand(svc.Flags{Name: "executor", HTTPAddr: "127.0.0.1:9101"})
	grpcAddr := cmd.String("grpc-addr", "127.0.0.1:9100", "ExecutorService listen address")
	gwf := dial.Register(cmd.FlagSet, "127.0.0.1:9300")
	// Only sweepers may ask an executor to charge.
	serverTLS := mtls.RegisterServer(cmd.FlagSet, "sweeper")
	id := cmd.String("id", obs.InstanceID("executor"), "executor id recorded in attempts")
	maxInFlight := cmd.Int("max-in-flight", 4000, "payments held at once across batches (a batch beyond it is refused untouched)")
	conc := cmd.Int("concurrency", 128, "gateway calls in flight")
	backoff := cmd.String("backoff", payment.DefaultBackoff.String(), "retry delays; their count is the retry budget")
	chargeTimeout := cmd.Duration("charge-timeout", 5*time.Second, "deadline of one Charge call")
	probeTimeout := cmd.Duration("probe-timeout", 2*time.Second, "deadline of the GetCharge probe")
	completers := cmd.Int("completers", 1, "outcome-writing statements at once (each writes whatever outcomes are ready)")
	completeBatch := cmd.Int("complete-batch", 1000, "outcomes written per statement at most")
	completeWait := cmd.Duration("complete-wait", 50*time.Millisecond, "how long the first outcome of a statement waits for more to join it (0-1s; it is written when --complete-batch are ready or this long after the first, and never later than its call's deadline)")
	streamLinger := cmd.Duration("stream-linger", 2*time.Millisecond, "how long outcomes streamed back to a sweeper wait for more to join their message (0-100ms)")
	margin := cmd.Duration("lease-margin", 2*time.Second, "a call starts only if its deadline falls this long before its claim's lease ends")
	payeeRate := cmd.Float64("payee-rate", 0, "charges per second per payee from this executor (a PSP's per-account limit divided by the executors; 0: none); a payment over it goes back to PENDING until its turn")
	payeeBurst := cmd.Int("payee-burst", 1, "charges a payee may take at once before --payee-rate paces it")
	maxReleases := cmd.Int("max-releases", 5, "claims of one payment released untouched in a row (its lease could not hold a call) before it is dead-lettered LEASE_TOO_SHORT")
	bounds := gateway.RegisterBounds(cmd.FlagSet)
	cmd.Main(func(ctx context.Context, log *slog.Logger) error {
		if err := cmd.Require(serverTLS.On(), errors.New("ExecutorService would serve plaintext: production needs --tls-cert-file, --tls-key-file and --tls-client-ca-file (mutual TLS: only sweepers may ask for a charge)")); err != nil {
			return err
		}
		sched, err := payment.ParseBackoff(*backoff)
		if err != nil {
			return fmt.Errorf("--backoff: %w", err)
		}
		if *chargeTimeout <= 0 || *probeTimeout <= 0 {
			return fmt.Errorf("--charge-timeout and --probe-timeout must be positive")
		}
		reg := obs.Registry()
		cfg := executor.Config{ID: *id, MaxInFlight: *maxInFlight, Concurrency: *conc, Backoff: sched, LeaseMargin: *margin,
			Completers: *completers, CompleteBatch: *completeBatch, CompleteWait: *completeWait, StreamLinger: *streamLinger, MaxReleases: *maxReleases,
			PayeeRate: *payeeRate, PayeeBurst: *payeeBurst}
		if *maxReleases < 1 {
			return fmt.Errorf("--max-releases must be at least 1, got %d", *maxReleases)
		}
		if err := bounds.Validate(); err != nil {
			return err
		}
		if *completers < 1 || *completeBatch < 1 {
			return fmt.Errorf("--completers and --complete-batch must be at least 1, got %d and %d", *completers, *completeBatch)
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		if err := gwf.ValidateFor(cmd.Mode); err != nil {
			return err
		}
		tlsOpts, err := serverTLS.Options()
		if err != nil {
			return err
		}
		pool, err := svc.Pool(ctx, *cmd.DB, 16, svc.CustomPlans)
		if err != nil {
			return err
		}
		defer pool.Close()
		gw, err := gwf.Open(ctx, svc.FastReconnect(), tracing.DialOption())
		if err != nil {
			return err
		}
		defer gw.Close()
		// Proofs of absence hold only within the contract's clock skew
		// margin: a gateway whose clock is further off is refused.
		if err := gateway.CheckClock(ctx, gw, func(ctx context.Context) (time.Time, error) { return store.Now(ctx, pool) }, time.Minute); err != nil {
			return err
		}
		ex, err := executor.New(cfg, pool,
			&gateway.Charger{Gateway: gw, ChargeTimeout: *chargeTimeout, ProbeTimeout: *probeTimeout,
				ActionTimeout: bounds.Action, ProcessingTimeout: bounds.Processing, MaxRequest: gwf.MaxRequestTime()},
			reg, log)
		if err != nil {
			return err
		}
		// A batch runs under its Execute RPC's context, so its read and
		// gateway calls are children of the RPC's span.
		gs := grpc.NewServer(svc.GRPCServerOptions(append(tlsOpts, tracing.ServerOption())...)...)
		internalv1.RegisterExecutorServiceServer(gs, ex)
		// GracefulStop lets batches in flight finish and record their outcomes.
		// No reflection: only sweepers call an executor.
		return svc.Server{Name: "executor", Log: log, Registry: reg, GRPC: gs, GRPCAddr: *grpcAddr,
			HTTPAddr: *cmd.HTTPAddr, Ready: pool.Ping, Grace: 60 * time.Second}.Run(ctx, nil)
	})
}
