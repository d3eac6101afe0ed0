package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/test/webhooktest"
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
	ep, _, err := tenanthook.CreateEndpoint(ctx, h.db, tenanthook.Endpoint{Tenant: "alice", URL: srv.URL + "/hook", MaxInflight: 4, MaxPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	const msg = "0f0e0d0c0b0a09080706050403020100"
	webhooktest.Deliver(t, h.db, notification.Note{ID: msg, Type: "paysched.payment.created", Tenant: "alice", Time: time.Now(),
		Key: []byte(pay.String()), Data: []byte(`{"paymentId":"` + pay.String() + `"}`)})

	vic, olga := h.as("vic", login.Viewer), h.as("olga", login.Operator)
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
	if s, due := state(); s != tenanthook.Waiting || due {
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
	if s, due := state(); s != tenanthook.Waiting || !due {
		t.Fatalf("after a resend: %s, due now %v", s, due)
	}
	// Spent: recover brings it back.
	if _, err := h.db.Exec(ctx, `UPDATE webhook_deliveries SET state = $2, next_at = now() + interval '1 day' WHERE msg_id = $1`,
		msg, tenanthook.Undelivered); err != nil {
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
	if s, due := state(); s != tenanthook.Waiting || !due {
		t.Fatalf("after a recover: %s, due now %v", s, due)
	}
	if page := h.get(olga, epPath+"?recovered=1").Body.String(); !strings.Contains(page, "1 undelivered messages are due again") {
		t.Fatalf("the recover is not told:\n%s", page)
	}
}

// TestEndpointRequestsAreDecidedInTheConsole: a rotation asked on the
// admin API shows on the endpoint's page; its requester is offered no
// approval (and refused one), a second admin approves it there, and the
// new secret shows that once; a recovery under a policy that wants two
// is a request, approved the same way.
func TestEndpointRequestsAreDecidedInTheConsole(t *testing.T) {
	p := approval.Strict()
	delete(p.Single, approval.Recover)
	h := newHarness(t, Config{Policy: p})
	ctx := context.Background()
	ep, _, err := tenanthook.CreateEndpoint(ctx, h.db, tenanthook.Endpoint{Tenant: "alice", URL: "https://hooks.example.com/x", MaxInflight: 4, MaxPerSecond: 100})
	if err != nil {
		t.Fatal(err)
	}
	rid, err := h.c.requests.RequestEndpoint(ctx, approval.EndpointRequest{Action: approval.Rotate, EndpointID: ep.ID, Reason: "leaked"},
		approval.Identity{Operator: "dev:ada", Name: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	ada, bea := h.as("ada", login.Admin), h.as("bea", login.Admin)
	epPath := "/console/webhooks/" + ep.ID.String()
	approveButton := fmt.Sprintf(`id="approve-%d"`, rid)
	if page := h.get(ada, epPath).Body.String(); !strings.Contains(page, fmt.Sprintf("endpoints/%d", rid)) || strings.Contains(page, approveButton) {
		t.Fatalf("the requester's page: the request must show, with no approval offered:\n%s", page)
	}
	decide := fmt.Sprintf("%s/requests/%d/decide", epPath, rid)
	if r := h.post(ada, decide, url.Values{"decision": {"approve"}}); r.Code != http.StatusConflict {
		t.Fatalf("the requester approving: %d", r.Code)
	}
	if page := h.get(bea, epPath).Body.String(); !strings.Contains(page, approveButton) {
		t.Fatalf("a second admin is offered no approval:\n%s", page)
	}
	r := h.post(bea, decide, url.Values{"decision": {"approve"}})
	if r.Code != 200 || !strings.Contains(r.Body.String(), `id="secret">whsec_`) {
		t.Fatalf("approval: %d %s", r.Code, r.Body.String())
	}
	got, err := tenanthook.GetEndpoint(ctx, h.db, ep.ID)
	if err != nil || got.RotateUntil == nil {
		t.Fatalf("after the approval the endpoint is %+v (%v), want two secrets", got, err)
	}
	// A recovery, where the policy wants two.
	olga := h.as("olga", login.Operator)
	since := time.Now().UTC().Add(-time.Hour).Format(dateForm)
	rec := h.post(olga, epPath+"/recover", url.Values{"since": {since}})
	if rec.Code != 303 || !strings.Contains(rec.Header().Get("Location"), "?requested=") {
		t.Fatalf("recover under a policy that wants two: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	q, err := h.c.requests.EndpointRequestsOf(ctx, ep.ID)
	if err != nil || len(q) != 2 || q[0].Action != approval.Recover || q[0].State != "AWAITING_APPROVAL" {
		t.Fatalf("requests %+v %v", q, err)
	}
	if r := h.post(bea, fmt.Sprintf("%s/requests/%d/decide", epPath, q[0].ID), url.Values{"decision": {"approve"}}); r.Code != 303 {
		t.Fatalf("approve the recovery: %d", r.Code)
	}
	if q, _ = h.c.requests.EndpointRequestsOf(ctx, ep.ID); q[0].State != "APPLIED" || q[0].Recovered == nil {
		t.Fatalf("after approval: %+v", q[0])
	}
}
