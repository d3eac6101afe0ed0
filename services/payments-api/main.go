// Command payments-api serves the public scheduling API: gRPC on
// --grpc-addr and REST (grpc-gateway) on --http-addr. Every flag has a
// PAYSCHED_* environment equivalent; the defaults suit `make up`.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/paysched/paysched/pkg/apiserver"
	"github.com/paysched/paysched/pkg/auth"
	"github.com/paysched/paysched/pkg/config"
	"github.com/paysched/paysched/pkg/obs"
	"github.com/paysched/paysched/pkg/paymentsapi"
	"github.com/paysched/paysched/pkg/ratelimit"
	"github.com/paysched/paysched/pkg/svc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "payments-api:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("payments-api", flag.ExitOnError)
	dbURL := fs.String("database-url", "postgres://postgres@127.0.0.1:55432/paysched?sslmode=disable", "Postgres URL")
	dbConns := fs.Int("db-max-conns", 32, "database pool size")
	httpAddr := fs.String("http-addr", "127.0.0.1:8080", "REST listen address")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:9090", "gRPC listen address")
	secret := fs.String("jwt-secret", auth.DevSecret, "HS256 secret for bearer tokens (local dev); empty disables HS256")
	jwks := fs.String("jwt-jwks-file", "", "JWKS file with the RS256 keys that sign bearer tokens (production)")
	issuer := fs.String("jwt-issuer", auth.DefaultIssuer, "required token issuer")
	audience := fs.String("jwt-audience", auth.DefaultAudience, "required token audience")
	currency := fs.String("default-currency", "USD", "currency used when a request names none")
	amountCap := fs.Int64("amount-cap", 100_000_000, "largest amount accepted, in minor units")
	horizon := fs.Duration("horizon", 365*24*time.Hour, "how far ahead dueAt may be")
	cursorSecret := fs.String("cursor-secret", "paysched-dev-cursor-secret", "HMAC key of list cursors")
	pprofAddr := fs.String("pprof-addr", "", "serve net/http/pprof on this address (off when empty)")
	gwAddr := fs.String("gateway-addr", "127.0.0.1:9300", "gateway the admin API reconciles against (empty: admin runs cannot be triggered here)")
	workers := fs.Int("create-workers", 8, "concurrent statements that write coalesced single creates")
	actorRate := fs.Float64("actor-rate", ratelimit.DefaultRate, "requests per second allowed to one actor (token bucket per actor, per instance); 0 disables the limit")
	actorBurst := fs.Int("actor-burst", ratelimit.DefaultBurst, "requests one actor may send at once after being idle")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		return err
	}

	log := obs.Logger("payments-api")
	obs.ServePprof(*pprofAddr, log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Spans go out over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set; the
	// last ones are flushed on the way out.
	defer svc.Tracing(ctx, "payments-api", log)()

	srv, err := apiserver.New(ctx, apiserver.Config{
		GatewayAddr: *gwAddr,
		DatabaseURL: *dbURL,
		DBMaxConns:  int32(*dbConns),
		Auth: auth.Config{HS256Secret: []byte(*secret), JWKSFile: *jwks, Issuer: *issuer,
			Audience: *audience, Leeway: 30 * time.Second},
		Rules:         paymentsapi.Rules{DefaultCurrency: *currency, AmountCap: *amountCap, Horizon: *horizon},
		CursorSecret:  []byte(*cursorSecret),
		CreateWorkers: *workers,
		RateLimit:     ratelimit.Config{Rate: *actorRate, Burst: *actorBurst},
	}, log)
	if err != nil {
		return err
	}
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return fmt.Errorf("listen grpc: %w", err)
	}
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("listen http: %w", err)
	}
	return srv.Serve(ctx, gl, hl)
}
