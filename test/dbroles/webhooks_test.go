package dbroles

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/webhook"
	"github.com/paysched/paysched/pkg/store"
)

// The webhook-dispatcher's role fans out, claims and records attempts, and
// admin-api's manages endpoints; the dispatcher may not point an endpoint
// elsewhere, read a payment beyond its tenant, or touch the money.
func TestWebhookRoles(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	adm, hooks := e.pools["paysched_admin"], e.pools["paysched_webhooks"]
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	ep, _, err := webhook.CreateEndpoint(ctx, adm, webhook.Endpoint{Tenant: "acme", URL: srv.URL})
	if err != nil {
		t.Fatalf("create endpoint as paysched_admin: %v", err)
	}
	pay := uuid.New()
	if _, err := store.NewStore(e.admin).Create(ctx, []store.NewPayment{{ID: pay, Payer: "alice", Tenant: "acme", Payee: "bob",
		Amount: 100, Currency: "USD", DueAt: time.Now().Add(time.Hour), CreatedAt: time.Now(), IdempotencyKey: "k"}}); err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Key: []byte(pay.String()), Value: []byte(`{"paymentId":"` + pay.String() + `"}`), Headers: []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte("m1")}, {Key: "ce_type", Value: []byte("paysched.payment.created")},
		{Key: "ce_time", Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))}}}
	if err := webhook.Fanout(ctx, hooks, []*kgo.Record{rec}); err != nil {
		t.Fatalf("fan out as paysched_webhooks: %v", err)
	}
	w := &webhook.Worker{DB: hooks, Client: webhook.Egress{Timeout: 5 * time.Second, Loopback: true}.Client()}
	ds, err := w.Claim(ctx, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim as paysched_webhooks: %v %v", ds, err)
	}
	w.Attempt(ctx, ds[0])
	var state string
	if err := adm.QueryRow(ctx, `SELECT state FROM webhook_deliveries`).Scan(&state); err != nil || state != webhook.DeliveredState {
		t.Fatalf("delivery as seen by paysched_admin: %q %v", state, err)
	}
	if _, err := webhook.RotateSecret(ctx, adm, "", ep.ID, time.Hour); err != nil {
		t.Fatalf("rotate as paysched_admin: %v", err)
	}
	if err := webhook.Resend(ctx, adm, "", ep.ID, "m1"); err != nil {
		t.Fatalf("resend as paysched_admin: %v", err)
	}
	for _, stmt := range []string{
		`UPDATE webhook_endpoints SET url = 'https://attacker.example/'`,
		`UPDATE webhook_endpoints SET tenant = 'other'`,
		`INSERT INTO webhook_endpoints (id, tenant, url, secrets) VALUES (gen_random_uuid(), 'x', 'https://a.example/', ARRAY['s'])`,
		`DELETE FROM webhook_deliveries`,
		`UPDATE webhook_deliveries SET body = 'x'`,
		`SELECT payer FROM payment_index`,
		`SELECT * FROM payments`,
		`UPDATE payments SET status = 'CANCELLED'`,
		`SELECT * FROM payment_attempts`,
	} {
		e.refused(t, "paysched_webhooks", stmt)
	}
	for _, role := range []string{"paysched_api", "paysched_sweeper", "paysched_executor", "paysched_reaper", "paysched_audit"} {
		e.refused(t, role, `SELECT secrets FROM webhook_endpoints`)
	}
	// payments-api: a tenant's own endpoints, rotated through the owner's
	// function, never reading or setting a secret itself.
	api := e.pools["paysched_api"]
	own, _, err := webhook.CreateEndpoint(ctx, api, webhook.Endpoint{Tenant: "acme", URL: "https://hooks.acme.example/"})
	if err != nil {
		t.Fatalf("create endpoint as paysched_api: %v", err)
	}
	if _, err := webhook.ListEndpoints(ctx, api, "acme"); err != nil {
		t.Fatalf("list as paysched_api: %v", err)
	}
	if _, err := webhook.RotateSecret(ctx, api, "acme", own.ID, time.Hour); err != nil {
		t.Fatalf("rotate as paysched_api: %v", err)
	}
	if err := webhook.SetEnabled(ctx, api, "acme", own.ID, false); err != nil {
		t.Fatalf("disable as paysched_api: %v", err)
	}
	if err := webhook.Resend(ctx, api, "acme", ep.ID, "m1"); err != nil {
		t.Fatalf("resend as paysched_api: %v", err)
	}
	if _, err := webhook.Recover(ctx, api, "acme", ep.ID, time.Now().Add(-time.Hour), nil); err != nil {
		t.Fatalf("recover as paysched_api: %v", err)
	}
	if _, err := webhook.Attempts(ctx, api, "acme", &pay, nil, 10); err != nil {
		t.Fatalf("delivery log as paysched_api: %v", err)
	}
	for _, stmt := range []string{
		`UPDATE webhook_endpoints SET secrets = ARRAY['x']`,
		`UPDATE webhook_endpoints SET url = 'https://attacker.example/'`,
		`DELETE FROM webhook_endpoints`,
		`INSERT INTO webhook_attempts (delivery_id, attempt, at, latency_ms) VALUES (1, 9, now(), 1)`,
	} {
		e.refused(t, "paysched_api", stmt)
	}
}
