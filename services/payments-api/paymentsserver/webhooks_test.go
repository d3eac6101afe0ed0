package paymentsserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/webhookapi"
	"github.com/paysched/paysched/pkg/events/tenanthook"
)

// A tenant's endpoints over REST, every answer checked against the OpenAPI
// document: created with the secret shown once, listed for its tenant
// only, refused to a token naming no tenant (403 NO_TENANT) or the default
// tenant (403 DEFAULT_TENANT), for a bad URL or rate (400) and past the
// cap (429); another tenant's is a 404, and resends past the burst 429.
func TestTenantWebhookEndpointsOverREST(t *testing.T) {
	e := start(t)
	mint := func(actor, tenant string) string {
		tok, err := auth.MintFor([]byte(testSecret), auth.DefaultIssuer, auth.DefaultAudience, actor, tenant, false, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	acme, globex := mint("alice", "acme"), mint("gina", "globex")
	r := e.do("POST", "/v1/webhook-endpoints", acme, nil, `{"url":"https://hooks.acme.example/p","eventTypes":["paysched.payment.completed"]}`)
	if r.code != http.StatusOK || !strings.HasPrefix(r.json(t)["secret"].(string), "whsec_") {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	id := r.json(t)["endpoint"].(map[string]any)["endpointId"].(string)
	if l := e.do("GET", "/v1/webhook-endpoints", globex, nil, ""); l.code != http.StatusOK || strings.Contains(string(l.body), id) {
		t.Fatalf("globex lists acme's endpoint: %d %s", l.code, l.body)
	}
	if l := e.do("GET", "/v1/webhook-endpoints", acme, nil, ""); l.code != http.StatusOK || !strings.Contains(string(l.body), id) {
		t.Fatalf("acme's list: %d %s", l.code, l.body)
	}
	for _, c := range []struct {
		method, path, tok, body string
		code                    int
		reason                  string
	}{
		{"POST", "/v1/webhook-endpoints", token(t, "bob"), `{"url":"https://x.example/"}`, http.StatusForbidden, "NO_TENANT"},
		{"POST", "/v1/webhook-endpoints", acme, `{"url":"http://hooks.acme.example/"}`, http.StatusBadRequest, "VALIDATION_FAILED"},
		{"POST", "/v1/webhook-endpoints/" + id + ":setEnabled", globex, `{"enabled":false}`, http.StatusNotFound, "NOT_FOUND"},
		{"POST", "/v1/webhook-endpoints/" + id + ":rotateSecret", globex, `{}`, http.StatusNotFound, "NOT_FOUND"},
		{"POST", "/v1/webhook-endpoints/" + id + ":recover", acme, `{}`, http.StatusBadRequest, "VALIDATION_FAILED"},
		{"GET", "/v1/webhook-attempts", acme, "", http.StatusBadRequest, "VALIDATION_FAILED"},
	} {
		got := e.do(c.method, c.path, c.tok, nil, c.body)
		if got.code != c.code || got.reason(t) != c.reason {
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.path, got.code, got.body, c.code, c.reason)
		}
	}
	// The default tenant is every unnamed payer's: a token naming it is
	// refused as one naming none is.
	if r := e.do("GET", "/v1/webhook-endpoints", mint("bob", auth.DefaultTenant), nil, ""); r.code != http.StatusForbidden || r.reason(t) != "DEFAULT_TENANT" {
		t.Errorf("a token naming the default tenant: %d %s, want 403 DEFAULT_TENANT", r.code, r.body)
	}
	if r := e.do("POST", "/v1/webhook-endpoints", acme, nil, `{"url":"https://hooks.acme.example/q","maxPerSecond":0.001}`); r.code != http.StatusBadRequest ||
		r.reason(t) != "VALIDATION_FAILED" || !r.fields(t)["maxPerSecond"] {
		t.Errorf("a rate under 1 a second: %d %s, want 400 naming maxPerSecond", r.code, r.body)
	}
	// The burst of resends, then 429 with Retry-After.
	for i := range webhookapi.ResendBurst {
		if r := e.do("POST", "/v1/webhook-endpoints/"+id+":resend", acme, nil, fmt.Sprintf(`{"webhookId":"m%d"}`, i)); r.code != http.StatusNotFound {
			t.Fatalf("resend %d: %d %s, want 404 (never sent)", i+1, r.code, r.body)
		}
	}
	if r := e.do("POST", "/v1/webhook-endpoints/"+id+":resend", acme, nil, `{"webhookId":"one-more"}`); r.code != http.StatusTooManyRequests ||
		r.reason(t) != "RATE_LIMITED" || r.header.Get("Retry-After") == "" {
		t.Errorf("resend %d: %d %v %s, want 429 RATE_LIMITED with Retry-After", webhookapi.ResendBurst+1, r.code, r.header, r.body)
	}
	// acme has 1 endpoint: 15 more, then 429 TOO_MANY_ENDPOINTS.
	for i := 1; i < tenanthook.MaxEndpointsPerTenant; i++ {
		if r := e.do("POST", "/v1/webhook-endpoints", acme, nil, fmt.Sprintf(`{"url":"https://hooks.acme.example/%d"}`, i)); r.code != http.StatusOK {
			t.Fatalf("endpoint %d: %d %s", i+1, r.code, r.body)
		}
	}
	if r := e.do("POST", "/v1/webhook-endpoints", acme, nil, `{"url":"https://hooks.acme.example/more"}`); r.code != http.StatusTooManyRequests ||
		r.reason(t) != "TOO_MANY_ENDPOINTS" {
		t.Errorf("endpoint %d: %d %s, want 429 TOO_MANY_ENDPOINTS", tenanthook.MaxEndpointsPerTenant+1, r.code, r.body)
	}
	if r := e.do("POST", "/v1/webhook-endpoints/"+id+":rotateSecret", acme, nil, `{"overlapSeconds":3600}`); r.code != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.code, r.body)
	}
	if r := e.do("GET", "/v1/webhook-attempts?endpointId="+id, acme, nil, ""); r.code != http.StatusOK {
		t.Fatalf("attempts: %d %s", r.code, r.body)
	}
}
