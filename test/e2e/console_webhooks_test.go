package e2e_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/test/webhooktest"
)

// TestConsoleWebhooksInABrowser: a payment's webhooks (a receiver that
// answers 503) show on its page; the operator opens the endpoint's page,
// sends the message again from its delivery log, and recovers the
// endpoint's failures since an hour ago, in a real admin-api's console.
func TestConsoleWebhooksInABrowser(t *testing.T) {
	tab := browser(t)
	db, ps, adminHTTP, _ := consoleStack(t)
	base := "http://" + adminHTTP
	waitHTTP(t, ps, base+"/console/login")
	pool, err := pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	pay := schedule(t, pool, "erin", 1, time.Now().Add(time.Hour))[0]
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"down for maintenance"}`))
	}))
	defer rcv.Close()
	ep, _, err := tenanthook.CreateEndpoint(ctx, pool, tenanthook.Endpoint{Tenant: "erin", URL: rcv.URL + "/paysched",
		Description: "erin's receiver", MaxInflight: 4, MaxPerSecond: 50})
	if err != nil {
		t.Fatal(err)
	}
	const msg = "5f1c0de2a0b94c8e9d7a6b5c4d3e2f10"
	webhooktest.Deliver(t, pool, notification.Note{ID: msg, Type: "paysched.payment.created", Tenant: "erin", Time: time.Now(),
		Key: []byte(pay.String()), Data: []byte(`{"paymentId":"` + pay.String() + `","status":"PENDING"}`)})

	alice, closeAlice := tab()
	defer closeAlice()
	if err := chromedp.Do(alice, devLogin(base, "alice")); err != nil {
		t.Fatalf("alice logs in: %v", err)
	}
	got, err := text(alice, "#webhooks-sent", chromedp.Navigate(base+"/console/payments/"+pay.String()), chromedp.WaitVisible("#webhooks-sent"))
	if err != nil || !strings.Contains(got, "HTTP 503") || !strings.Contains(got, rcv.URL) {
		t.Fatalf("the payment's webhooks read %q (%v)", got, err)
	}
	shot(t, alice, "payment-webhooks")
	got, err = text(alice, "#delivery-log", chromedp.Navigate(base+"/console/webhooks/"+ep.ID.String()), chromedp.WaitVisible("#delivery-log"))
	if err != nil || !strings.Contains(got, msg) || !strings.Contains(got, "down for maintenance") {
		t.Fatalf("the delivery log reads %q (%v)", got, err)
	}
	shot(t, alice, "webhook-endpoint")
	got, err = text(alice, "#resent", chromedp.Click(`#delivery-log button[type="submit"]`), chromedp.WaitVisible("#resent"))
	if err != nil || !strings.Contains(got, msg) {
		t.Fatalf("after send again: %q (%v)", got, err)
	}
	// Spent: recover brings it back.
	if _, err := pool.Exec(ctx, `UPDATE webhook_deliveries SET state = $1 WHERE msg_id = $2`, tenanthook.Undelivered, msg); err != nil {
		t.Fatal(err)
	}
	since := time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04")
	got, err = text(alice, "#recovered", chromedp.SetValue("#since", since), chromedp.Click("#recover"), chromedp.WaitVisible("#recovered"))
	if err != nil || !strings.HasPrefix(got, "1 ") {
		t.Fatalf("after recover: %q (%v)", got, err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM webhook_deliveries WHERE msg_id = $1`, msg).Scan(&state); err != nil || state != tenanthook.Waiting {
		t.Fatalf("after recover the delivery is %q (%v)", state, err)
	}
}
