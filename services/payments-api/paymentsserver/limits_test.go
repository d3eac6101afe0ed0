package paymentsserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/services/payments-api/paymentsserver"
)

// batchBody is a batchCreate body of n items for bob, due in an hour.
func batchBody(prefix string, n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"requestId":"%s-%d","payee":"bob","amount":%d,"dueAt":%q}`, prefix, i, 100+i, future(time.Hour))
	}
	return `{"items":[` + strings.Join(items, ",") + `]}`
}

// TestBatchItemsCountAgainstTheRate: a batchCreate of n costs n of the
// actor's rate, not one, so batches cannot carry a flood past the limit;
// the refusal is a 429 with Retry-After and writes nothing.
func TestBatchItemsCountAgainstTheRate(t *testing.T) {
	e := start(t, func(c *paymentsserver.Config) { c.RateLimit = ratelimit.Config{Rate: 1, Burst: 50} })
	alice := token(t, "alice")
	if r := e.do("POST", create+":batchCreate", alice, nil, batchBody("a", 40)); r.code != http.StatusOK {
		t.Fatalf("first batch of 40 (burst 50): %d %s", r.code, r.body)
	}
	r := e.do("POST", create+":batchCreate", alice, nil, batchBody("b", 40))
	if r.code != http.StatusTooManyRequests || r.reason(t) != "RATE_LIMITED" || r.header.Get("Retry-After") == "" {
		t.Fatalf("second batch of 40 with 10 tokens left: %d %s (Retry-After %q)", r.code, r.body, r.header.Get("Retry-After"))
	}
	if n := e.count(`SELECT count(*) FROM payments`); n != 40 {
		t.Fatalf("%d payments, want the first batch's 40", n)
	}
	// Another actor is untouched.
	if r := e.do("POST", create+":batchCreate", token(t, "bob"), nil, batchBody("c", 40)); r.code != http.StatusOK {
		t.Fatalf("bob's batch: %d %s", r.code, r.body)
	}
}

// TestPendingCap: an actor may have at most --max-pending payments
// scheduled and not yet due; past it creates, single or batched, get 429
// TOO_MANY_PENDING with Retry-After and write nothing; others are
// unaffected.
func TestPendingCap(t *testing.T) {
	e := start(t, func(c *paymentsserver.Config) { c.Rules.MaxPending = 30 })
	alice := token(t, "alice")
	if r := e.do("POST", create+":batchCreate", alice, nil, batchBody("a", 25)); r.code != http.StatusOK {
		t.Fatalf("batch of 25: %d %s", r.code, r.body)
	}
	for i := range 5 {
		if r := e.do("POST", create, alice, key(fmt.Sprint("s", i)), body("bob", 1, future(time.Hour))); r.code != http.StatusCreated {
			t.Fatalf("create %d of the last 5: %d %s", i, r.code, r.body)
		}
	}
	r := e.do("POST", create, alice, key("over"), body("bob", 1, future(time.Hour)))
	if r.code != http.StatusTooManyRequests || r.reason(t) != payments.ReasonTooManyPending || r.header.Get("Retry-After") == "" {
		t.Fatalf("the 31st: %d %s", r.code, r.body)
	}
	if r := e.do("POST", create+":batchCreate", alice, nil, batchBody("b", 2)); r.code != http.StatusTooManyRequests {
		t.Fatalf("a batch past the cap: %d %s", r.code, r.body)
	}
	if n := e.count(`SELECT count(*) FROM payments WHERE payer = 'alice'`); n != 30 {
		t.Fatalf("alice has %d payments, want 30", n)
	}
	if r := e.do("POST", create, token(t, "bob"), key("b1"), body("carol", 1, future(time.Hour))); r.code != http.StatusCreated {
		t.Fatalf("bob: %d %s", r.code, r.body)
	}
}
