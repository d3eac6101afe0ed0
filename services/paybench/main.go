// Command paybench is the API benchmark behind `make bench-api`: it drives a
// running payments-api with concurrent REST, gRPC and batch clients and
// prints payments/s and latency percentiles, ending with one `bench` line.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/paysched/paysched/pkg/apibench"
	"github.com/paysched/paysched/pkg/auth"
	"github.com/paysched/paysched/pkg/config"
)

func main() {
	fs := flag.NewFlagSet("paybench", flag.ExitOnError)
	httpBase := fs.String("api-http", "http://127.0.0.1:8080", "payments-api REST base URL")
	grpcAddr := fs.String("api-grpc", "127.0.0.1:9090", "payments-api gRPC address")
	secret := fs.String("jwt-secret", auth.DevSecret, "HS256 secret to mint the bench token")
	conc := fs.Int("concurrency", 64, "concurrent clients for single creates")
	batchConc := fs.Int("batch-concurrency", 8, "concurrent clients for batchCreate")
	dur := fs.Duration("duration", 10*time.Second, "length of each phase")
	batch := fs.Int("batch-size", 1000, "items per batchCreate")
	if err := config.Parse(fs, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "paybench:", err)
		os.Exit(2)
	}
	tok, err := auth.Mint([]byte(*secret), auth.DefaultIssuer, auth.DefaultAudience, "bench", false, time.Hour)
	if err != nil {
		fmt.Fprintln(os.Stderr, "paybench:", err)
		os.Exit(1)
	}
	cfg := apibench.Config{HTTPBase: *httpBase, GRPCAddr: *grpcAddr, Token: tok, Concurrency: *conc,
		Duration: *dur, BatchSize: *batch, RunID: fmt.Sprint(time.Now().UnixNano())}
	rest := apibench.REST(cfg)
	fmt.Println(rest)
	grpcRes, err := apibench.GRPC(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "paybench:", err)
		os.Exit(1)
	}
	fmt.Println(grpcRes)
	batchRes, err := apibench.Batch(cfg, *batchConc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "paybench:", err)
		os.Exit(1)
	}
	fmt.Println(batchRes)
	fmt.Printf("bench rest_creates_per_s=%.0f rest_p50_ms=%.2f rest_p99_ms=%.2f grpc_creates_per_s=%.0f grpc_p50_ms=%.2f grpc_p99_ms=%.2f batch_payments_per_s=%.0f errors=%d\n",
		rest.PerSecond(), ms(rest.P50), ms(rest.P99), grpcRes.PerSecond(), ms(grpcRes.P50), ms(grpcRes.P99),
		batchRes.PerSecond(), rest.Errors+grpcRes.Errors+batchRes.Errors)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
