package paysched_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	paysched "github.com/paysched/paysched/sdk/go"
)

// A stand-in for payments-api, so the examples run anywhere.
func exampleServer() *httptest.Server {
	seen := map[string]bool{}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/scheduled-payments":
			key := r.Header.Get("Idempotency-Key")
			if seen[key] {
				w.Header().Set("Idempotent-Replayed", "true")
			}
			seen[key] = true
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"paymentId":"0197a000-0000-7000-8000-000000000001","status":"PENDING","amount":1250,"currency":"EUR"}`)
		case r.URL.Path == "/v1/scheduled-payments":
			fmt.Fprint(w, `{"payments":[{"paymentId":"p2","status":"PENDING"},{"paymentId":"p1","status":"COMPLETED"}],"nextCursor":""}`)
		default:
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"code":9,"message":"the payment is being charged","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"ALREADY_PROCESSING","domain":"paysched"}]}`)
		}
	}))
}

func Example() {
	srv := exampleServer()
	defer srv.Close()
	c, err := paysched.New(srv.URL, paysched.WithToken("<a JWT>"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	payee, amount, due := "landlord", int64(1250), time.Now().Add(24*time.Hour)
	// The same key (kept with the business action) makes one payment,
	// whatever the retries.
	key := paysched.NewKey()
	for range 2 {
		p, err := c.CreatePayment(ctx, paysched.NewPayment{Payee: &payee, Amount: &amount, DueAt: &due}, paysched.WithIdempotencyKey(key))
		if err != nil {
			panic(err)
		}
		fmt.Println(*p.Value.Status, "replayed:", p.Replayed)
	}
	for p, err := range c.Payments(ctx, paysched.ListPayments{}) {
		if err != nil {
			panic(err)
		}
		fmt.Println(*p.PaymentId, *p.Status)
	}
	if _, err := c.CancelPayment(ctx, "p1"); errors.Is(err, paysched.ErrAlreadyProcessing) {
		fmt.Println("too late to cancel")
	}
	// Output:
	// PENDING replayed: false
	// PENDING replayed: true
	// p2 PENDING
	// p1 COMPLETED
	// too late to cancel
}
