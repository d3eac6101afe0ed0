// Package apibench drives payments-api with concurrent clients over REST and
// gRPC and reports throughput and latency percentiles. It is a benchmark,
// not a test: it prints figures and judges nothing.
package apibench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	paysched "github.com/paysched/paysched/sdk/go"
)

// Config says what to run.
type Config struct {
	HTTPBase    string // http://127.0.0.1:8080
	GRPCAddr    string // 127.0.0.1:9090
	Token       string
	Concurrency int
	Duration    time.Duration
	BatchSize   int
	// RunID makes idempotency keys unique across runs on one database.
	RunID string
}

// Result is one phase's figures.
type Result struct {
	Name     string
	Ops      int64 // successful requests
	Items    int64 // payments created (batch: items per request)
	Errors   int64
	Elapsed  time.Duration
	P50, P99 time.Duration
}

// PerSecond is payments created per second.
func (r Result) PerSecond() float64 { return float64(r.Items) / r.Elapsed.Seconds() }

func (r Result) String() string {
	return fmt.Sprintf("%-14s %9.0f payments/s  requests=%d errors=%d p50=%.2fms p99=%.2fms",
		r.Name, r.PerSecond(), r.Ops, r.Errors, ms(r.P50), ms(r.P99))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// run calls op from n goroutines for d and collects latencies.
func run(name string, n int, d time.Duration, itemsPerOp int64, op func(worker, i int) error) Result {
	var ops, errs atomic.Int64
	lats := make([][]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				t0 := time.Now()
				if err := op(w, i); err != nil {
					errs.Add(1)
					continue
				}
				lats[w] = append(lats[w], time.Since(t0))
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := Result{Name: name, Ops: ops.Load(), Items: ops.Load() * itemsPerOp, Errors: errs.Load(), Elapsed: elapsed}
	if len(all) > 0 {
		r.P50, r.P99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r
}

func due() string { return time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339) }

// REST creates one payment per request over HTTP/1.1 keep-alive connections.
func REST(cfg Config) Result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency}, Timeout: 30 * time.Second}
	url := cfg.HTTPBase + "/v1/scheduled-payments"
	dueAt := due()
	return run("rest-create", cfg.Concurrency, cfg.Duration, 1, func(w, i int) error {
		body := fmt.Sprintf(`{"payee":"payee-%d","amount":%d,"currency":"USD","dueAt":%q}`, w, 100+i, dueAt)
		req, _ := http.NewRequest("POST", url, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-r-%d-%d", cfg.RunID, w, i))
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	})
}

func dialPool(cfg Config, n int) ([]payschedv1.PaymentsServiceClient, func(), error) {
	var conns []*grpc.ClientConn
	var clients []payschedv1.PaymentsServiceClient
	for range n {
		cc, err := grpc.NewClient(cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, err
		}
		conns = append(conns, cc)
		clients = append(clients, payschedv1.NewPaymentsServiceClient(cc))
	}
	return clients, func() {
		for _, c := range conns {
			c.Close()
		}
	}, nil
}

// grpcClients dials the pool and returns an authenticated context and a
// due time a day ahead, which every gRPC phase uses.
func grpcClients(cfg Config) ([]payschedv1.PaymentsServiceClient, context.Context, *timestamppb.Timestamp, func(), error) {
	clients, closeAll, err := dialPool(cfg, 4)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+cfg.Token)
	return clients, ctx, timestamppb.New(time.Now().Add(24 * time.Hour)), closeAll, nil
}

// GRPC creates one payment per call, spread over a few HTTP/2 connections.
func GRPC(cfg Config) (Result, error) {
	clients, ctx, dueAt, closeAll, err := grpcClients(cfg)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	return run("grpc-create", cfg.Concurrency, cfg.Duration, 1, func(w, i int) error {
		_, err := clients[w%len(clients)].CreateScheduledPayment(ctx, &payschedv1.CreateScheduledPaymentRequest{
			Payee: fmt.Sprint("payee-", w), Amount: int64(100 + i), Currency: "USD", DueAt: dueAt,
			RequestId: fmt.Sprintf("%s-g-%d-%d", cfg.RunID, w, i),
		})
		return err
	}), nil
}

// Batch creates BatchSize payments per call.
func Batch(cfg Config, concurrency int) (Result, error) {
	clients, ctx, dueAt, closeAll, err := grpcClients(cfg)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	r := run("batch-create", concurrency, cfg.Duration, int64(cfg.BatchSize), func(w, i int) error {
		items := make([]*payschedv1.CreateScheduledPaymentRequest, cfg.BatchSize)
		for j := range items {
			items[j] = &payschedv1.CreateScheduledPaymentRequest{
				Payee: fmt.Sprint("payee-", j), Amount: int64(100 + j), Currency: "USD", DueAt: dueAt,
				RequestId: fmt.Sprintf("%s-b-%d-%d-%d", cfg.RunID, w, i, j),
			}
		}
		resp, err := clients[w%len(clients)].BatchCreateScheduledPayments(ctx, &payschedv1.BatchCreateScheduledPaymentsRequest{Items: items})
		if err != nil {
			return err
		}
		for _, res := range resp.GetResults() {
			if res.GetOutcome() != payschedv1.BatchCreateResult_OUTCOME_CREATED {
				return fmt.Errorf("item %d: %s %s", res.GetIndex(), res.GetReason(), res.GetMessage())
			}
		}
		return nil
	})
	return r, nil
}

// SDK creates one payment per request through the Go SDK (sdk/go), over
// the same transport as REST: its idempotency key, its retry layer and its
// decoding are what it adds.
func SDK(cfg Config) (Result, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, MaxConnsPerHost: cfg.Concurrency}, Timeout: 30 * time.Second}
	c, err := paysched.New(cfg.HTTPBase, paysched.WithToken(cfg.Token), paysched.WithHTTPClient(hc))
	if err != nil {
		return Result{}, err
	}
	dueAt := time.Now().Add(24 * time.Hour)
	currency := "USD"
	return run("sdk-create", cfg.Concurrency, cfg.Duration, 1, func(w, i int) error {
		payee, amount := fmt.Sprintf("payee-%d", w), int64(100+i)
		_, err := c.CreatePayment(context.Background(), paysched.NewPayment{Payee: &payee, Amount: &amount, Currency: &currency, DueAt: &dueAt},
			paysched.WithIdempotencyKey(fmt.Sprintf("%s-s-%d-%d", cfg.RunID, w, i)))
		return err
	}), nil
}
