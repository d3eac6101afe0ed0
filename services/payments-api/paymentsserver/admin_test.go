package paymentsserver_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/rest"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/services/admin-api/adminserver"
	"github.com/paysched/paysched/tools/gatewaysim"
)

func adminToken(t testing.TB, actor string) string {
	t.Helper()
	tok, err := auth.Mint([]byte(testSecret), auth.DefaultIssuer, auth.DefaultAdminAudience, actor, true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// withGateway serves an in-memory gateway-sim and points the admin API at it.
func withGateway(t *testing.T) (*gatewaysim.MemLedger, func(*adminserver.Config)) {
	ledger := gatewaysim.NewMemLedger()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, gatewaysim.New(ledger, nil))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return ledger, func(c *adminserver.Config) { c.Gateway = &dial.Flags{Kind: dial.KindGRPC, Addr: lis.Addr().String()} }
}

// deadLetter makes a dead-lettered payment of payer.
func (e *env) deadLetter(payer, reason string) uuid.UUID {
	e.t.Helper()
	id, _ := uuid.NewV7()
	_, err := store.NewStore(e.db).Create(context.Background(), []store.NewPayment{{ID: id, Payer: payer, Payee: "bob",
		Amount: 700, Currency: "EUR", DueAt: time.Now().Add(-time.Hour), CreatedAt: time.Now(), IdempotencyKey: id.String(),
		RequestHash: []byte{1}, Response: []byte{1}}})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.db.Exec(context.Background(), `UPDATE payments SET status = 'DEAD_LETTERED', dead_letter_reason = $2, attempt = 1, retries = 5 WHERE id = $1`, id, reason); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.db.Exec(context.Background(), `INSERT INTO payment_attempts (payment_id, attempt, started_at, finished_at, gateway_key, outcome, executor_id)
		VALUES ($1::uuid, 1, now(), now(), $2, 'RETRYABLE', 'test')`, id, id.String()); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// TestAdminRequiresTheAdminClaim: admin-api accepts only admin tokens
// (their own audience) with the admin claim; a payer's token, or the
// admin claim in a payer's token, opens nothing.
func TestAdminRequiresTheAdminClaim(t *testing.T) {
	e := startAdmin(t)
	id := e.deadLetter("alice", "RETRIES_EXHAUSTED")
	user := token(t, "alice")
	claimingAdmin, err := auth.Mint([]byte(testSecret), auth.DefaultIssuer, auth.DefaultAudience, "mallory", true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	noClaim, err := auth.Mint([]byte(testSecret), auth.DefaultIssuer, auth.DefaultAdminAudience, "mallory", false, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/admin/dead-letters", ""},
		{"POST", "/v1/admin/scheduled-payments/" + id.String() + ":redrive", `{"note":"x"}`},
		{"POST", "/v1/admin/scheduled-payments/" + id.String() + ":resolve", `{"note":"x"}`},
		{"POST", "/v1/admin/scheduled-payments/" + id.String() + ":cancel", `{"note":"x"}`},
		{"GET", "/v1/admin/reconciliation-runs", ""},
		{"POST", "/v1/admin/reconciliation-runs", `{"day":"2026-01-01"}`},
	} {
		// A payer's token is for another audience: not even authenticated here.
		if got := e.do(r.method, r.path, user, nil, r.body); got.code != http.StatusUnauthorized {
			t.Fatalf("%s %s with a payer's token: %d %s", r.method, r.path, got.code, got.body)
		}
		if got := e.do(r.method, r.path, "", nil, r.body); got.code != http.StatusUnauthorized {
			t.Fatalf("%s %s without a token: %d", r.method, r.path, got.code)
		}
		// The admin claim in a payments token (the customers' audience)
		// opens nothing: admin tokens carry their own audience.
		if got := e.do(r.method, r.path, claimingAdmin, nil, r.body); got.code != http.StatusUnauthorized {
			t.Fatalf("%s %s with an admin claim for the payments audience: %d %s", r.method, r.path, got.code, got.body)
		}
		// An admin-audience token without the claim is authenticated, not allowed.
		if got := e.do(r.method, r.path, noClaim, nil, r.body); got.code != http.StatusForbidden || got.reason(t) != "PERMISSION_DENIED" {
			t.Fatalf("%s %s without the admin claim: %d %s", r.method, r.path, got.code, got.body)
		}
	}
	admin := payschedv1.NewAdminServiceClient(e.cc)
	ctx := authed(noClaim)
	for name, call := range map[string]func() error{
		"ListDeadLetters": func() error { _, err := admin.ListDeadLetters(ctx, &payschedv1.ListDeadLettersRequest{}); return err },
		"RedrivePayment": func() error {
			_, err := admin.RedrivePayment(ctx, &payschedv1.RedrivePaymentRequest{PaymentId: id.String()})
			return err
		},
		"ResolvePayment": func() error {
			_, err := admin.ResolvePayment(ctx, &payschedv1.ResolvePaymentRequest{PaymentId: id.String(), Note: "x"})
			return err
		},
		"CancelPayment": func() error {
			_, err := admin.CancelPayment(ctx, &payschedv1.CancelPaymentRequest{PaymentId: id.String(), Note: "x"})
			return err
		},
		"ListReconciliationRuns": func() error {
			_, err := admin.ListReconciliationRuns(ctx, &payschedv1.ListReconciliationRunsRequest{})
			return err
		},
		"TriggerReconciliationRun": func() error {
			_, err := admin.TriggerReconciliationRun(ctx, &payschedv1.TriggerReconciliationRunRequest{})
			return err
		},
	} {
		if code := status.Code(call()); code != codes.PermissionDenied {
			t.Fatalf("%s as a non-admin: %s", name, code)
		}
	}
	if n := e.count(`SELECT count(*) FROM payments WHERE id = $1 AND status = 'DEAD_LETTERED'`, id); n != 1 {
		t.Fatal("a refused admin call moved the payment")
	}
	if n := e.count(`SELECT count(*) FROM payment_actions`); n != 0 {
		t.Fatalf("refused calls wrote %d actions", n)
	}
}

func TestAdminDeadLetterActionsAreAudited(t *testing.T) {
	// Re-drive and resolve ask the gateway first: one that holds no charge.
	_, gw := withGateway(t)
	e := startAdmin(t, gw)
	a := e.deadLetter("alice", "RETRIES_EXHAUSTED")
	b := e.deadLetter("carol", "AMBIGUOUS_UNRESOLVED")
	ops, joe := adminToken(t, "ops-jane"), adminToken(t, "ops-joe")
	// approved checks that an action answered a request awaiting a second
	// admin (nothing moved: the payment is still dead-lettered), that
	// jane cannot approve it herself, and has joe approve it over REST.
	approved := func(what string, got resp, id uuid.UUID) {
		t.Helper()
		req, _ := got.json(t)["request"].(map[string]any)
		if got.code != 200 || req["state"] != "AWAITING_APPROVAL" || req["requestedBy"] != "token:paysched-local#ops-jane" {
			t.Fatalf("%s: %d %s, want a request awaiting approval", what, got.code, got.body)
		}
		if n := e.count(`SELECT count(*) FROM payments WHERE id = $1 AND status = 'DEAD_LETTERED'`, id); n != 1 {
			t.Fatalf("%s by one admin moved the payment", what)
		}
		name, _ := req["name"].(string)
		if own := e.do("POST", "/v1/admin/requests/"+name+":approve", ops, nil, `{}`); own.code != 403 || own.reason(t) != "OWN_REQUEST" {
			t.Fatalf("%s approved by its requester: %d %s", what, own.code, own.body)
		}
		ok := e.do("POST", "/v1/admin/requests/"+name+":approve", joe, nil, `{}`)
		r, _ := ok.json(t)["request"].(map[string]any)
		if ok.code != 200 || r["state"] != "DONE" || r["done"] != float64(1) || r["decidedBy"] != "token:paysched-local#ops-joe" {
			t.Fatalf("%s approved by a second admin: %d %s", what, ok.code, ok.body)
		}
	}
	defer func() {
		// Cancel (an operator's): needs a note; then CANCELLED, audited.
		c := e.deadLetter("dave", "LEASE_TOO_SHORT")
		if got := e.do("POST", "/v1/admin/scheduled-payments/"+c.String()+":cancel", ops, nil, `{}`); got.code != 400 {
			t.Fatalf("cancel without a note: %d", got.code)
		}
		approved("cancel", e.do("POST", "/v1/admin/scheduled-payments/"+c.String()+":cancel", ops, nil, `{"note":"customer asked"}`), c)
		if n := e.count(`SELECT count(*) FROM payment_actions WHERE payment_id = $1 AND actor = 'admin:ops-jane' AND action = 'CANCEL'
			AND prev_status = 'DEAD_LETTERED' AND new_status = 'CANCELLED'
			AND reason LIKE 'customer asked (request #% via api, requested by ops-jane, approved by ops-joe)'`, c); n != 1 {
			t.Fatal("the cancel is not audited")
		}
		if got := e.do("POST", "/v1/admin/scheduled-payments/"+c.String()+":cancel", ops, nil, `{"note":"again"}`); got.code != 400 || got.reason(t) != "NOT_AT_REST" {
			t.Fatalf("second cancel: %d %s", got.code, got.body)
		}
	}()

	got := e.do("GET", "/v1/admin/dead-letters?pageSize=1", ops, nil, "")
	if got.code != 200 {
		t.Fatalf("list: %d %s", got.code, got.body)
	}
	var page struct {
		DeadLetters []struct {
			Payment struct {
				PaymentID string `json:"paymentId"`
				Payer     string `json:"payer"`
				Attempts  []any  `json:"attempts"`
			} `json:"payment"`
			Reason string `json:"reason"`
		} `json:"deadLetters"`
		NextPageToken string `json:"nextPageToken"`
	}
	if err := json.Unmarshal(got.body, &page); err != nil || len(page.DeadLetters) != 1 || page.NextPageToken == "" ||
		page.DeadLetters[0].Payment.PaymentID != a.String() || page.DeadLetters[0].Reason != "RETRIES_EXHAUSTED" ||
		len(page.DeadLetters[0].Payment.Attempts) != 1 {
		t.Fatalf("first page: %s", got.body)
	}
	got = e.do("GET", "/v1/admin/dead-letters?pageSize=1&pageToken="+page.NextPageToken, ops, nil, "")
	if err := json.Unmarshal(got.body, &page); err != nil || len(page.DeadLetters) != 1 || page.DeadLetters[0].Payment.PaymentID != b.String() ||
		page.DeadLetters[0].Payment.Payer != "carol" {
		t.Fatalf("second page: %s", got.body)
	}
	if got := e.do("GET", "/v1/admin/dead-letters?pageToken=garbage", ops, nil, ""); got.code != 400 {
		t.Fatalf("bad page token: %d", got.code)
	}

	// Re-drive: PENDING, due now, fresh budget, same key.
	approved("redrive", e.do("POST", "/v1/admin/scheduled-payments/"+a.String()+":redrive", ops, nil, `{"note":"gateway fixed"}`), a)
	if n := e.count(`SELECT count(*) FROM payments WHERE id = $1 AND status = 'PENDING' AND retries = 0 AND run_at <= now() AND dead_letter_reason IS NULL`, a); n != 1 {
		t.Fatal("re-drive did not reset the payment")
	}
	// Resolve needs a note; then FAILED.
	if got := e.do("POST", "/v1/admin/scheduled-payments/"+b.String()+":resolve", ops, nil, `{}`); got.code != 400 {
		t.Fatalf("resolve without a note: %d", got.code)
	}
	approved("resolve", e.do("POST", "/v1/admin/scheduled-payments/"+b.String()+":resolve", ops, nil, `{"note":"refunded by hand"}`), b)
	// Neither can be moved again: they are no longer dead letters.
	for _, id := range []uuid.UUID{a, b} {
		got := e.do("POST", "/v1/admin/scheduled-payments/"+id.String()+":redrive", ops, nil, `{}`)
		if got.code != http.StatusBadRequest || got.reason(t) != "NOT_DEAD_LETTERED" {
			t.Fatalf("second move: %d %s", got.code, got.body)
		}
	}
	if got := e.do("POST", "/v1/admin/scheduled-payments/"+uuid.NewString()+":redrive", ops, nil, `{}`); got.code != 404 {
		t.Fatalf("unknown payment: %d", got.code)
	}
	if got := e.do("POST", "/v1/admin/scheduled-payments/nope:redrive", ops, nil, `{}`); got.code != 400 {
		t.Fatalf("bad id: %d", got.code)
	}
	// Admin bodies have the same limits as the payments API's: size and
	// media type, before anything is read or moved.
	huge := `{"note":"` + strings.Repeat("x", rest.MaxOtherBody) + `"}`
	for _, path := range []string{"/v1/admin/scheduled-payments/" + uuid.NewString() + ":resolve", "/v1/admin/reconciliation-runs"} {
		if got := e.do("POST", path, ops, nil, huge); got.code != http.StatusRequestEntityTooLarge || got.reason(t) != "BODY_TOO_LARGE" {
			t.Fatalf("%s with a %d-byte body: %d %s", path, len(huge), got.code, got.body)
		}
		if got := e.do("POST", path, ops, map[string]string{"Content-Type": "text/plain"}, `{}`); got.code != http.StatusUnsupportedMediaType {
			t.Fatalf("%s as text/plain: %d %s", path, got.code, got.body)
		}
	}
	// The audit trail: who, when, what, the previous status and why.
	if n := e.count(`SELECT count(*) FROM payment_actions WHERE actor = 'admin:ops-jane' AND at > now() - interval '1 minute' AND (
		(payment_id = $1 AND action = 'REDRIVE' AND prev_status = 'DEAD_LETTERED' AND new_status = 'PENDING' AND reason LIKE 'gateway fixed (request #%') OR
		(payment_id = $2 AND action = 'RESOLVE' AND prev_status = 'DEAD_LETTERED' AND new_status = 'FAILED' AND reason LIKE 'refunded by hand (request #%'))`, a, b); n != 2 {
		t.Fatalf("audited actions = %d, want 2", n)
	}
}

// TestPaymentsAPIHasNoAdminSide: payments-api, the internet's door,
// serves no admin route and refuses an admin token, claim and all.
func TestPaymentsAPIHasNoAdminSide(t *testing.T) {
	e := start(t)
	ops := adminToken(t, "ops")
	get := func(path, tok string) int {
		req, _ := http.NewRequest("GET", e.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := get("/v1/admin/dead-letters", ops); got != http.StatusUnauthorized {
		t.Fatalf("an admin token on payments-api: %d", got)
	}
	if got := get("/v1/admin/dead-letters", token(t, "alice")); got != http.StatusNotFound {
		t.Fatalf("an admin route on payments-api: %d", got)
	}
	if got := get("/v1/scheduled-payments", ops); got != http.StatusUnauthorized {
		t.Fatalf("an admin token as a payer: %d", got)
	}
	_, err := payschedv1.NewAdminServiceClient(e.cc).ListDeadLetters(authed(ops), &payschedv1.ListDeadLettersRequest{})
	if status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.Unimplemented {
		t.Fatalf("AdminService on payments-api: %v", err)
	}
}

func TestAdminTriggersAndListsRuns(t *testing.T) {
	ledger, gw := withGateway(t)
	e := startAdmin(t, gw)
	id := e.deadLetter("alice", "AMBIGUOUS_UNRESOLVED")
	day := time.Now().UTC()
	if _, _, err := ledger.Record(context.Background(), &gatewaysim.Charge{ID: "ch_1", Key: id.String(), Reference: id.String(),
		Amount: 700, Currency: "EUR", CreatedAt: day}); err != nil {
		t.Fatal(err)
	}
	ops := adminToken(t, "ops")
	if got := e.do("POST", "/v1/admin/reconciliation-runs", ops, nil, `{"day":"2999-01-01"}`); got.code != 400 {
		t.Fatalf("future day: %d", got.code)
	}
	if got := e.do("POST", "/v1/admin/reconciliation-runs", ops, nil, `{"day":"yesterday"}`); got.code != 400 {
		t.Fatalf("bad day: %d", got.code)
	}
	got := e.do("POST", "/v1/admin/reconciliation-runs", ops, nil, `{"day":"`+day.Format(time.DateOnly)+`"}`)
	run := got.json(t)["run"].(map[string]any)
	if got.code != 200 || run["state"] != "SUCCEEDED" || run["repaired"] != float64(1) || run["mismatches"] != float64(0) ||
		run["triggeredBy"] != "admin:ops" {
		t.Fatalf("trigger: %d %s", got.code, got.body)
	}
	if n := e.count(`SELECT count(*) FROM payments WHERE id = $1 AND status = 'COMPLETED' AND gateway_ref = 'ch_1'`, id); n != 1 {
		t.Fatal("the run did not repair the payment")
	}
	got = e.do("GET", "/v1/admin/reconciliation-runs?day="+day.Format(time.DateOnly), ops, nil, "")
	runs := got.json(t)["runs"].([]any)
	if got.code != 200 || len(runs) != 1 || len(runs[0].(map[string]any)["items"].([]any)) != 1 {
		t.Fatalf("list runs: %d %s", got.code, got.body)
	}
}

// TestEveryGuardedRESTRouteMakesARequest: over REST, with one admin
// token, each route that moves money, changes a limit or rotates a secret
// answers a request awaiting approval and changes nothing; a hold (one
// admin's under the default policy) acts at once.
func TestEveryGuardedRESTRouteMakesARequest(t *testing.T) {
	_, gw := withGateway(t)
	e := startAdmin(t, gw)
	ops := adminToken(t, "ops-jane")
	ctx := context.Background()
	// in puts a dead letter (as deadLetter makes it) in status st.
	in := func(st string) uuid.UUID {
		id := e.deadLetter("alice", "RETRIES_EXHAUSTED")
		if st == "DEAD_LETTERED" {
			return id
		}
		if _, err := e.db.Exec(ctx, `UPDATE payments SET status = $2, dead_letter_reason = NULL, probe_first = true,
			run_at = now() + interval '1 hour' WHERE id = $1`, id, st); err != nil {
			t.Fatal(err)
		}
		return id
	}
	payment := func(id uuid.UUID) string {
		var s string
		if err := e.db.QueryRow(ctx, `SELECT status || ' ' || run_at::text || ' ' || updated_at::text FROM payments WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	soon := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		name, status, route, body string
	}{
		{"redrive", "DEAD_LETTERED", ":redrive", `{"note":"psp back"}`},
		{"resolve", "DEAD_LETTERED", ":resolve", `{"note":"never charged"}`},
		{"cancel", "PENDING", ":cancel", `{"note":"customer asked"}`},
		{"release", "HELD", ":release", `{}`},
		{"reschedule", "HELD", ":reschedule", `{"runAt":"` + soon + `","note":"payroll moved"}`},
		{"run now", "PENDING", ":runNow", `{"note":"customer waiting"}`},
	} {
		id := in(c.status)
		before := payment(id)
		got := e.do("POST", "/v1/admin/scheduled-payments/"+id.String()+c.route, ops, nil, c.body)
		req, _ := got.json(t)["request"].(map[string]any)
		if got.code != 200 || req["state"] != "AWAITING_APPROVAL" || got.json(t)["payment"] != nil {
			t.Fatalf("%s: %d %s, want a request awaiting approval", c.name, got.code, got.body)
		}
		if now := payment(id); now != before {
			t.Fatalf("%s by one admin changed the payment: %s, was %s", c.name, now, before)
		}
	}
	got := e.do("PUT", "/v1/admin/tenants/acme/limits?note=more+room", ops, nil, `{"weight":9}`)
	if req, _ := got.json(t)["request"].(map[string]any); got.code != 200 || req["state"] != "AWAITING_APPROVAL" || e.count(`SELECT count(*) FROM tenant_limits`) != 0 {
		t.Fatalf("limits: %d %s", got.code, got.body)
	}
	hook, _, err := tenanthook.CreateEndpoint(ctx, e.db, tenanthook.Endpoint{Tenant: "acme", URL: "https://hooks.example.com/x", MaxInflight: 4, MaxPerSecond: 10})
	if err != nil {
		t.Fatal(err)
	}
	got = e.do("POST", "/v1/admin/webhook-endpoints/"+hook.ID.String()+":rotateSecret", ops, nil, `{}`)
	if req, _ := got.json(t)["request"].(map[string]any); got.code != 200 || req["state"] != "AWAITING_APPROVAL" ||
		e.count(`SELECT count(*) FROM webhook_endpoints WHERE id = $1 AND cardinality(secrets) = 1`, hook.ID) != 1 {
		t.Fatalf("rotate: %d %s", got.code, got.body)
	}
	// A hold stops money: one admin's.
	id := in("PENDING")
	got = e.do("POST", "/v1/admin/scheduled-payments/"+id.String()+":hold", ops, nil, `{"note":"wrong payroll"}`)
	if p, _ := got.json(t)["payment"].(map[string]any); got.code != 200 || p["status"] != "HELD" {
		t.Fatalf("hold: %d %s", got.code, got.body)
	}
	list := e.do("GET", "/v1/admin/requests?state=AWAITING_APPROVAL", ops, nil, "")
	if rs, _ := list.json(t)["requests"].([]any); list.code != 200 || len(rs) != 8 {
		t.Fatalf("requests awaiting approval: %d %s, want 8", list.code, list.body)
	}
}
