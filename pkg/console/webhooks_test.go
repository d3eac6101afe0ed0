package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/webhook"
)

// TestWebhookPages: a payment's deliveries show on its page and timeline,
// a tenant's endpoints on its page, an endpoint's delivery log on its
// own; operators (not viewers) send a message again and recover an
// endpoint's failures since a time, and bad input is a 400, not a 500.
func TestWebhookPages(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	pay := h.schedule(1, time.Now().Add(time.Hour), 500)[0]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("receiver down"))
	}))
	defer srv.Close()
	ep, _, err := webhook.CreateEndpoint(ctx, h.db, webhook.Endpoint{Tenant: "alice", URL: srv.URL + "/hook", MaxInflight: 4, MaxPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	const msg = "0f0e0d0c0b0a09080706050403020100"
	rec := &kgo.Record{Key: []byte(pay.String()), Value: []byte(`{"paymentId":"` + pay.String() + `"}`), Headers: []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte(msg)}, {Key: "ce_type", Value: []byte("paysched.payment.created")},
		{Key: "ce_time", Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))}}}
	if err := webhook.Fanout(ctx, h.db, []*kgo.Record{rec}); err != nil {
		t.Fatal(err)
	}
	w := &webhook.Worker{DB: h.db, Client: webhook.Egress{Loopback: true, Timeout: 5 * time.Second}.Client()}
	ds, err := w.Claim(ctx, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	w.Attempt(ctx, ds[0])

	vic, olga := h.as("vic", Viewer), h.as("olga", Operator)
	page := h.get(vic, "/console/payments/"+pay.String()).Body.String()
	for _, want := range []string{`id="webhooks-sent"`, srv.URL + "/hook", "HTTP 500", "webhook paysched.payment.created to " + srv.URL} {
		if !strings.Contains(page, want) {
			t.Fatalf("the payment page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "Send again") {
		t.Fatal("a viewer is offered to send a webhook again")
	}
	if page := h.get(vic, "/console/tenants/alice").Body.String(); !strings.Contains(page, "/console/webhooks/"+ep.ID.String()) {
		t.Fatalf("the tenant page lacks its endpoint:\n%s", page)
	}
	epPath := "/console/webhooks/" + ep.ID.String()
	if r := h.get(vic, epPath); r.Code != 200 || !strings.Contains(r.Body.String(), msg) || !strings.Contains(r.Body.String(), "receiver down") {
		t.Fatalf("the endpoint page: %d\n%s", r.Code, r.Body.String())
	}
	for path, code := range map[string]int{"/console/webhooks/nope": 400, "/console/webhooks/" + uuid.NewString(): 404} {
		if r := h.get(vic, path); r.Code != code {
			t.Errorf("GET %s: %d, want %d", path, r.Code, code)
		}
	}
	state := func() (string, bool) {
		var s string
		var due bool
		if err := h.db.QueryRow(ctx, `SELECT state, next_at <= now() FROM webhook_deliveries WHERE msg_id = $1`, msg).Scan(&s, &due); err != nil {
			t.Fatal(err)
		}
		return s, due
	}
	if s, due := state(); s != webhook.Waiting || due {
		t.Fatalf("after a 500: %s, due now %v (want a retry later)", s, due)
	}
	resend := url.Values{"msg": {msg}, "payment": {pay.String()}}
	if r := h.post(vic, epPath+"/resend", resend); r.Code != 403 {
		t.Fatalf("a viewer resent: %d", r.Code)
	}
	for form, code := range map[string]int{"": 400, "a b": 400, "ffff": 409} {
		if r := h.post(olga, epPath+"/resend", url.Values{"msg": {form}}); r.Code != code {
			t.Errorf("resend %q: %d, want %d", form, r.Code, code)
		}
	}
	if r := h.post(olga, epPath+"/resend", resend); r.Code != 303 || r.Header().Get("Location") != "/console/payments/"+pay.String() {
		t.Fatalf("resend: %d %s", r.Code, r.Header().Get("Location"))
	}
	if s, due := state(); s != webhook.Waiting || !due {
		t.Fatalf("after a resend: %s, due now %v", s, due)
	}
	// Spent: recover brings it back.
	if _, err := h.db.Exec(ctx, `UPDATE webhook_deliveries SET state = $2, next_at = now() + interval '1 day' WHERE msg_id = $1`,
		msg, webhook.Undelivered); err != nil {
		t.Fatal(err)
	}
	since := time.Now().UTC().Add(-time.Hour).Format(dateForm)
	for form, code := range map[*url.Values]int{
		{}:                                    400,
		{"since": {"yesterday"}}:              400,
		{"since": {since}, "until": {"soon"}}: 400,
		{"since": {since}, "until": {"2000-01-01T00:00"}}: 400,
	} {
		if r := h.post(olga, epPath+"/recover", *form); r.Code != code {
			t.Errorf("recover %v: %d, want %d", *form, r.Code, code)
		}
	}
	if r := h.post(vic, epPath+"/recover", url.Values{"since": {since}}); r.Code != 403 {
		t.Fatalf("a viewer recovered: %d", r.Code)
	}
	r := h.post(olga, epPath+"/recover", url.Values{"since": {since}})
	if r.Code != 303 || !strings.HasSuffix(r.Header().Get("Location"), "?recovered=1") {
		t.Fatalf("recover: %d %s", r.Code, r.Header().Get("Location"))
	}
	if s, due := state(); s != webhook.Waiting || !due {
		t.Fatalf("after a recover: %s, due now %v", s, due)
	}
	if page := h.get(olga, epPath+"?recovered=1").Body.String(); !strings.Contains(page, "1 undelivered messages are due again") {
		t.Fatalf("the recover is not told:\n%s", page)
	}
}
