package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
)

// A tenant's endpoints over REST, every answer checked against the OpenAPI
// document: created with the secret shown once, listed for its tenant
// only, refused to a token naming no tenant (403 NO_TENANT) and for a bad
// URL (400), and another tenant's is a 404.
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
	if r := e.do("POST", "/v1/webhook-endpoints/"+id+":rotateSecret", acme, nil, `{"overlapSeconds":3600}`); r.code != http.StatusOK {
		t.Fatalf("rotate: %d %s", r.code, r.body)
	}
	if r := e.do("GET", "/v1/webhook-attempts?endpointId="+id, acme, nil, ""); r.code != http.StatusOK {
		t.Fatalf("attempts: %d %s", r.code, r.body)
	}
}
