package paymentsserver_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
)

const create = "/v1/scheduled-payments"

func body(payee string, amount int64, due string) string {
	return fmt.Sprintf(`{"payee":%q,"amount":%d,"dueAt":%q}`, payee, amount, due)
}

func key(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }

func TestCreateReplayAndReuse(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	b := `{"payee":"bob","amount":1500,"currency":"USD","dueAt":"` + future(time.Hour) +
		`","description":"rent","metadata":{"invoice":"42"}}`

	first := e.do("POST", create, alice, key("k1"), b)
	if first.code != http.StatusCreated {
		t.Fatalf("create: %d %s", first.code, first.body)
	}
	p := first.json(t)
	if p["status"] != "PENDING" || p["amount"] != float64(1500) || p["currency"] != "USD" || p["payer"] != "alice" {
		t.Fatalf("unexpected resource: %s", first.body)
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a first create is not a replay")
	}

	replay := e.do("POST", create, alice, key("k1"), b)
	if replay.code != first.code || string(replay.body) != string(first.body) {
		t.Fatalf("replay: %d %s, want %d %s", replay.code, replay.body, first.code, first.body)
	}
	if replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay not marked")
	}

	reused := e.do("POST", create, alice, key("k1"), strings.Replace(b, "1500", "1501", 1))
	if reused.code != http.StatusConflict || reused.reason(t) != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("reuse: %d %s", reused.code, reused.body)
	}

	// Keys are scoped to (actor, key): bob's k1 is a new payment.
	bobs := e.do("POST", create, token(t, "bob"), key("k1"), b)
	if bobs.code != http.StatusCreated || bobs.json(t)["paymentId"] == p["paymentId"] {
		t.Fatalf("bob's k1: %d %s", bobs.code, bobs.body)
	}
	if n := e.count(`SELECT count(*) FROM payments`); n != 2 {
		t.Fatalf("payments = %d, want 2", n)
	}

	missing := e.do("POST", create, alice, nil, b)
	if missing.code != http.StatusBadRequest || missing.reason(t) != "IDEMPOTENCY_KEY_REQUIRED" {
		t.Fatalf("missing key: %d %s", missing.code, missing.body)
	}

	// The configured default currency applies and is stated.
	def := e.do("POST", create, alice, key("k2"), body("carol", 5, future(time.Hour)))
	if def.code != http.StatusCreated || def.json(t)["currency"] != "EUR" {
		t.Fatalf("default currency: %d %s", def.code, def.body)
	}
}

func TestReplayAfterDueTimeStillAnswers(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	b := body("bob", 10, time.Now().Add(1500*time.Millisecond).UTC().Format(time.RFC3339Nano))
	first := e.do("POST", create, alice, key("late"), b)
	if first.code != http.StatusCreated {
		t.Fatalf("create: %d %s", first.code, first.body)
	}
	time.Sleep(1600 * time.Millisecond)
	again := e.do("POST", create, alice, key("late"), b)
	if again.code != http.StatusCreated || string(again.body) != string(first.body) {
		t.Fatalf("late replay: %d %s", again.code, again.body)
	}
}

func TestValidationRejectsAndWritesNothing(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	due := future(time.Hour)
	long := func(n int) string { return strings.Repeat("x", n) }
	meta := func(n, klen, vlen int) string {
		var kv []string
		for i := range n {
			kv = append(kv, fmt.Sprintf("%q:%q", fmt.Sprintf("%0*d", klen, i), long(vlen)))
		}
		return "{" + strings.Join(kv, ",") + "}"
	}
	cases := []struct {
		name, body string
		fields     []string
	}{
		{"amount zero", body("bob", 0, due), []string{"amount"}},
		{"amount negative", body("bob", -5, due), []string{"amount"}},
		{"amount above cap", body("bob", 1_000_001, due), []string{"amount"}},
		{"amount fraction", `{"payee":"bob","amount":1.5,"dueAt":"` + due + `"}`, []string{"amount"}},
		{"amount exponent", `{"payee":"bob","amount":1e3,"dueAt":"` + due + `"}`, []string{"amount"}},
		{"amount string", `{"payee":"bob","amount":"100","dueAt":"` + due + `"}`, []string{"amount"}},
		{"amount overflow", `{"payee":"bob","amount":99999999999999999999,"dueAt":"` + due + `"}`, []string{"amount"}},
		{"unknown currency", `{"payee":"bob","amount":1,"currency":"XYZ","dueAt":"` + due + `"}`, []string{"currency"}},
		{"lower-case currency", `{"payee":"bob","amount":1,"currency":"usd","dueAt":"` + due + `"}`, []string{"currency"}},
		{"due in the past", body("bob", 1, "2020-01-01T00:00:00Z"), []string{"dueAt"}},
		{"due now", body("bob", 1, time.Now().UTC().Format(time.RFC3339)), []string{"dueAt"}},
		{"due beyond horizon", body("bob", 1, future(367*24*time.Hour)), []string{"dueAt"}},
		{"due malformed", body("bob", 1, "tomorrow"), []string{"dueAt"}},
		{"due missing", `{"payee":"bob","amount":1}`, []string{"dueAt"}},
		{"payee empty", body("", 1, due), []string{"payee"}},
		{"payee blank", body("   ", 1, due), []string{"payee"}},
		{"payee too long", body(long(129), 1, due), []string{"payee"}},
		{"payee NUL", `{"payee":"bo\u0000b","amount":1,"dueAt":"` + due + `"}`, []string{"payee"}},
		{"payee control char", `{"payee":"bo\u001bb","amount":1,"dueAt":"` + due + `"}`, []string{"payee"}},
		{"description NUL", `{"payee":"bob","amount":1,"dueAt":"` + due + `","description":"\u0000"}`, []string{"description"}},
		{"too many metadata keys", `{"payee":"bob","amount":1,"dueAt":"` + due + `","metadata":` + meta(21, 2, 1) + `}`, []string{"metadata"}},
		{"metadata key too long", `{"payee":"bob","amount":1,"dueAt":"` + due + `","metadata":` + meta(1, 41, 1) + `}`, []string{"metadata." + fmt.Sprintf("%041d", 0)}},
		{"metadata value too long", `{"payee":"bob","amount":1,"dueAt":"` + due + `","metadata":{"k":"` + long(501) + `"}}`, []string{"metadata.k"}},
		{"metadata not strings", `{"payee":"bob","amount":1,"dueAt":"` + due + `","metadata":{"k":1}}`, []string{"metadata"}},
		{"description too long", `{"payee":"bob","amount":1,"dueAt":"` + due + `","description":"` + long(501) + `"}`, []string{"description"}},
		{"unknown field", `{"payee":"bob","amount":1,"dueAt":"` + due + `","payer":"mallory"}`, []string{"payer"}},
		{"every field wrong", `{"payee":"","amount":"x","currency":"???","dueAt":"2020-01-01T00:00:00Z","extra":true}`,
			[]string{"payee", "amount", "currency", "dueAt", "extra"}},
		{"not an object", `[1,2]`, []string{"body"}},
		{"not JSON", `{"payee":`, []string{"body"}},
		{"empty body", ``, []string{"body"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", create, alice, map[string]string{"Idempotency-Key": fmt.Sprint("v", i), "Content-Type": "application/json"}, c.body)
			if r.code != http.StatusBadRequest || r.reason(t) != "VALIDATION_FAILED" {
				t.Fatalf("%d %s", r.code, r.body)
			}
			got := r.fields(t)
			for _, f := range c.fields {
				if !got[f] {
					t.Errorf("violation for %q missing: %s", f, r.body)
				}
			}
			if len(got) != len(c.fields) {
				t.Errorf("violations %v, want exactly %v", got, c.fields)
			}
		})
	}
	if n := e.count(`SELECT count(*) FROM payments`) + e.count(`SELECT count(*) FROM payment_index`); n != 0 {
		t.Fatalf("rejected requests wrote %d rows", n)
	}
}

func TestBodyLimitsAndContentType(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	big := `{"payee":"bob","amount":1,"dueAt":"` + future(time.Hour) + `","description":"` + strings.Repeat("x", 70<<10) + `"}`
	r := e.do("POST", create, alice, key("big"), big)
	if r.code != http.StatusRequestEntityTooLarge || r.reason(t) != "BODY_TOO_LARGE" {
		t.Fatalf("oversize: %d %s", r.code, r.body)
	}
	r = e.do("POST", create, alice, map[string]string{"Idempotency-Key": "ct", "Content-Type": "text/plain"}, body("bob", 1, future(time.Hour)))
	if r.code != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: %d %s", r.code, r.body)
	}
	r = e.do("PUT", create, alice, nil, "")
	if r.code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
}

func TestGetListCancel(t *testing.T) {
	e := start(t)
	alice, bob := token(t, "alice"), token(t, "bob")
	var ids []string
	for i := range 5 {
		r := e.do("POST", create, alice, key(fmt.Sprint("g", i)), body("bob", int64(i+1), future(time.Hour)))
		if r.code != http.StatusCreated {
			t.Fatalf("create: %d %s", r.code, r.body)
		}
		ids = append(ids, r.json(t)["paymentId"].(string))
	}
	e.do("POST", create, bob, key("b"), body("alice", 1, future(time.Hour)))

	got := e.do("GET", create+"/"+ids[0], alice, nil, "")
	if got.code != http.StatusOK || got.json(t)["paymentId"] != ids[0] {
		t.Fatalf("get: %d %s", got.code, got.body)
	}
	if _, ok := got.json(t)["attempts"].([]any); !ok {
		t.Fatalf("get has no attempts list: %s", got.body)
	}
	for _, c := range []struct {
		path, tok string
		code      int
	}{
		{create + "/" + ids[0], bob, http.StatusNotFound},
		{create + "/00000000-0000-0000-0000-000000000000", alice, http.StatusNotFound},
		{create + "/not-a-uuid", alice, http.StatusBadRequest},
		{create + "/" + ids[0] + "x", alice, http.StatusBadRequest},
	} {
		if r := e.do("GET", c.path, c.tok, nil, ""); r.code != c.code {
			t.Errorf("GET %s: %d %s, want %d", c.path, r.code, r.body, c.code)
		}
	}
	// A 404 for another actor's payment reads exactly like a missing one.
	a := e.do("GET", create+"/"+ids[0], bob, nil, "")
	b := e.do("GET", create+"/00000000-0000-0000-0000-000000000000", bob, nil, "")
	if string(a.body) != string(b.body) {
		t.Fatalf("404 bodies differ: %s vs %s", a.body, b.body)
	}

	// List: newest first, only alice's, paged with an opaque cursor.
	page := e.do("GET", create+"?pageSize=2", alice, nil, "")
	pj := page.json(t)
	ps := pj["payments"].([]any)
	if page.code != http.StatusOK || len(ps) != 2 || ps[0].(map[string]any)["paymentId"] != ids[4] {
		t.Fatalf("list: %d %s", page.code, page.body)
	}
	var seen []string
	cursor := ""
	for {
		r := e.do("GET", create+"?pageSize=2&cursor="+cursor, alice, nil, "")
		j := r.json(t)
		for _, p := range j["payments"].([]any) {
			seen = append(seen, p.(map[string]any)["paymentId"].(string))
		}
		cursor, _ = j["nextCursor"].(string)
		if cursor == "" {
			break
		}
	}
	if len(seen) != 5 || seen[0] != ids[4] || seen[4] != ids[0] {
		t.Fatalf("paged list %v, want %v reversed", seen, ids)
	}
	cur := pj["nextCursor"].(string)
	for _, c := range []struct{ q, tok string }{
		{"?cursor=garbage", alice},
		{"?cursor=" + cur[:len(cur)-2] + "AA", alice}, // tampered
		{"?cursor=" + cur, bob},                       // another actor's
		{"?status=CANCELLED&cursor=" + cur, alice},    // another filter
		{"?pageSize=-1", alice},
		{"?status=BOGUS", alice},
		{"?pageSize=abc", alice},
	} {
		if r := e.do("GET", create+c.q, c.tok, nil, ""); r.code != http.StatusBadRequest {
			t.Errorf("list %s: %d %s, want 400", c.q, r.code, r.body)
		}
	}
	if r := e.do("GET", create+"?pageSize=100000", alice, nil, ""); r.code != http.StatusOK {
		t.Errorf("huge pageSize is capped, not refused: %d", r.code)
	}

	// Cancel: 200, idempotent, 404 for others, 409 once processing.
	if r := e.do("DELETE", create+"/"+ids[1], bob, nil, ""); r.code != http.StatusNotFound {
		t.Fatalf("bob cancels alice's: %d", r.code)
	}
	for range 2 {
		r := e.do("DELETE", create+"/"+ids[1], alice, nil, "")
		if r.code != http.StatusOK || r.json(t)["status"] != "CANCELLED" {
			t.Fatalf("cancel: %d %s", r.code, r.body)
		}
	}
	for _, st := range []string{"PROCESSING", "COMPLETED", "FAILED", "DEAD_LETTERED"} {
		if _, err := e.db.Exec(t.Context(), `UPDATE payments SET status = $2 WHERE id = $1`, ids[2], st); err != nil {
			t.Fatal(err)
		}
		r := e.do("DELETE", create+"/"+ids[2], alice, nil, "")
		if r.code != http.StatusConflict || r.reason(t) != "ALREADY_PROCESSING" || !strings.Contains(string(r.body), `"status":"`+st+`"`) {
			t.Fatalf("cancel %s: %d %s", st, r.code, r.body)
		}
	}
	filtered := e.do("GET", create+"?status=CANCELLED", alice, nil, "").json(t)["payments"].([]any)
	if len(filtered) != 1 {
		t.Fatalf("status filter: %v", filtered)
	}
}

func TestBatchCreate(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	due := future(time.Hour)
	item := func(k string, amount int) string {
		return fmt.Sprintf(`{"requestId":%q,"payee":"bob","amount":%d,"dueAt":%q}`, k, amount, due)
	}
	b := `{"items":[` + strings.Join([]string{
		item("a", 1), item("b", 0), `{"payee":"bob","amount":1,"dueAt":"` + due + `"}`, item("a", 1), item("a", 2),
	}, ",") + `]}`
	r := e.do("POST", create+":batchCreate", alice, nil, b)
	if r.code != http.StatusOK {
		t.Fatalf("batch: %d %s", r.code, r.body)
	}
	want := []struct{ outcome, reason string }{
		{"OUTCOME_CREATED", ""}, {"OUTCOME_REJECTED", "VALIDATION_FAILED"},
		{"OUTCOME_REJECTED", "IDEMPOTENCY_KEY_REQUIRED"}, {"OUTCOME_REPLAYED", ""},
		{"OUTCOME_REJECTED", "IDEMPOTENCY_KEY_REUSED"},
	}
	results := r.json(t)["results"].([]any)
	for i, w := range want {
		got := results[i].(map[string]any)
		if got["outcome"] != w.outcome || got["reason"] != w.reason {
			t.Errorf("item %d: %v, want %v", i, got, w)
		}
	}
	// Replaying the whole batch creates nothing new.
	e.do("POST", create+":batchCreate", alice, nil, b)
	if n := e.count(`SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
	var many []string
	for i := range 1001 {
		many = append(many, item(fmt.Sprint("m", i), 1))
	}
	if r := e.do("POST", create+":batchCreate", alice, nil, `{"items":[`+strings.Join(many, ",")+`]}`); r.code != http.StatusBadRequest {
		t.Fatalf("1001 items: %d", r.code)
	}
	if r := e.do("POST", create+":batchCreate", alice, nil, `{"items":[`+strings.Join(many[:1000], ",")+`]}`); r.code != http.StatusOK {
		t.Fatalf("1000 items: %d %s", r.code, r.body)
	}
	if n := e.count(`SELECT count(*) FROM payments`); n != 1001 {
		t.Fatalf("payments = %d, want 1001", n)
	}
}

func TestServiceEndpoints(t *testing.T) {
	e := start(t)
	for _, p := range []string{"/healthz", "/openapi.json"} {
		if r := e.do("GET", p, "", nil, ""); r.code != http.StatusOK {
			t.Errorf("GET %s: %d", p, r.code)
		}
	}
	if r := e.do("GET", "/openapi.json", "", nil, ""); !strings.Contains(string(r.body), "/v1/scheduled-payments:batchCreate") {
		t.Error("OpenAPI document lacks the batchCreate route")
	} else {
		for p := range r.json(t)["paths"].(map[string]any) {
			if strings.HasPrefix(p, "/v1/admin/") {
				t.Errorf("the public OpenAPI document has the admin route %s", p)
			}
		}
	}
	// The admin document: admin-api's, to admin callers only.
	const adminDoc = "/v1/admin/openapi.json"
	a := startAdmin(t)
	noClaim, _ := auth.Mint([]byte(testSecret), auth.DefaultIssuer, auth.DefaultAdminAudience, "ops", false, time.Hour)
	if r := a.do("GET", adminDoc, "", nil, ""); r.code != http.StatusUnauthorized {
		t.Errorf("GET %s without a token: %d", adminDoc, r.code)
	}
	if r := a.do("GET", adminDoc, noClaim, nil, ""); r.code != http.StatusForbidden || r.reason(t) != "PERMISSION_DENIED" {
		t.Errorf("GET %s without the admin claim: %d %s", adminDoc, r.code, r.body)
	}
	if r := a.do("GET", "/openapi.json", "", nil, ""); r.code == http.StatusOK {
		t.Errorf("admin-api serves the public document")
	}
	r := a.do("GET", adminDoc, adminToken(t, "ops"), nil, "")
	if r.code != http.StatusOK || !strings.Contains(string(r.body), "/v1/admin/dead-letters") ||
		strings.Contains(string(r.body), `"/v1/scheduled-payments"`) {
		t.Errorf("GET %s as admin: %d %.200s", adminDoc, r.code, r.body)
	}
}

// TestConcurrentIdenticalCreates sends 100 identical creates at once: one
// payment, and 100 identical answers.
func TestConcurrentIdenticalCreates(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	b := body("bob", 4200, future(time.Hour))
	const n = 100
	out := make([]resp, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			out[i] = e.do("POST", create, alice, key("same"), b)
		}()
	}
	close(gate)
	wg.Wait()
	for i, r := range out {
		if r.code != http.StatusCreated || string(r.body) != string(out[0].body) {
			t.Fatalf("answer %d: %d %s, want 201 %s", i, r.code, r.body, out[0].body)
		}
	}
	if n := e.count(`SELECT count(*) FROM payments`); n != 1 {
		t.Fatalf("payments = %d, want 1", n)
	}
}
