package dbroles

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/events/tenanthook"
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
	ep, _, err := tenanthook.CreateEndpoint(ctx, adm, tenanthook.Endpoint{Tenant: "acme", URL: srv.URL})
	if err != nil {
		t.Fatalf("create endpoint as paysched_admin: %v", err)
	}
	pay := uuid.New()
	// The dispatcher's work as paysched_webhooks: read the endpoints, take
	// a slot (an advisory lock on a session of its own), attempt, record
	// the message and the delivery, retire old rows.
	d := &tenanthook.Deliverer{DB: hooks, Client: tenanthook.Egress{Timeout: 5 * time.Second, Loopback: true}.Client(),
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, hooks.Config().ConnConfig) }}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = d.Run(rctx); close(done) }()
	<-d.Ready()
	recorded := make(chan struct{})
	d.Submit(notification.Note{ID: "m1", Type: "paysched.payment.created", Tenant: "acme", Time: time.Now(), Key: []byte(pay.String()),
		Data: []byte(`{"paymentId":"` + pay.String() + `"}`)}, func() { close(recorded) })
	select {
	case <-recorded:
	case <-time.After(30 * time.Second):
		t.Fatal("the delivery was not recorded as paysched_webhooks")
	}
	stop()
	<-done
	var state string
	if err := adm.QueryRow(ctx, `SELECT state FROM webhook_deliveries`).Scan(&state); err != nil || state != tenanthook.DeliveredState {
		t.Fatalf("delivery as seen by paysched_admin: %q %v", state, err)
	}
	if _, err := tenanthook.Sweep(ctx, hooks, time.Now().Add(-time.Hour), 10); err != nil {
		t.Fatalf("retention as paysched_webhooks: %v", err)
	}
	if _, err := tenanthook.RotateSecret(ctx, adm, "", ep.ID, time.Hour); err != nil {
		t.Fatalf("rotate as paysched_admin: %v", err)
	}
	if err := tenanthook.Resend(ctx, adm, "", ep.ID, "m1"); err != nil {
		t.Fatalf("resend as paysched_admin: %v", err)
	}
	for _, stmt := range []string{
		`UPDATE webhook_endpoints SET url = 'https://attacker.example/'`,
		`UPDATE webhook_endpoints SET tenant = 'other'`,
		`INSERT INTO webhook_endpoints (id, tenant, url, secrets) VALUES (gen_random_uuid(), 'x', 'https://a.example/', ARRAY['s'])`,
		`UPDATE webhook_messages SET body = 'x'`,
		`UPDATE webhook_deliveries SET endpoint_id = gen_random_uuid()`,
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
	own, _, err := tenanthook.CreateEndpoint(ctx, api, tenanthook.Endpoint{Tenant: "acme", URL: "https://hooks.acme.example/"})
	if err != nil {
		t.Fatalf("create endpoint as paysched_api: %v", err)
	}
	if _, err := tenanthook.ListEndpoints(ctx, api, "acme"); err != nil {
		t.Fatalf("list as paysched_api: %v", err)
	}
	if _, err := tenanthook.RotateSecret(ctx, api, "acme", own.ID, time.Hour); err != nil {
		t.Fatalf("rotate as paysched_api: %v", err)
	}
	if err := tenanthook.SetEnabled(ctx, api, "acme", own.ID, false); err != nil {
		t.Fatalf("disable as paysched_api: %v", err)
	}
	if err := tenanthook.Resend(ctx, api, "acme", ep.ID, "m1"); err != nil {
		t.Fatalf("resend as paysched_api: %v", err)
	}
	if _, err := tenanthook.Recover(ctx, api, "acme", ep.ID, time.Now().Add(-time.Hour), nil); err != nil {
		t.Fatalf("recover as paysched_api: %v", err)
	}
	if _, err := tenanthook.Attempts(ctx, api, "acme", &pay, nil, 10); err != nil {
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
