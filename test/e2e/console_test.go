package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/paysched/paysched/pkg/console"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/pgtest"
)

// chromium finds Debian's chromium (make test's installer adds it). With
// PAYSCHED_REQUIRE_BROWSER set (make test) its absence fails the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("PAYSCHED_REQUIRE_BROWSER") != "" {
		t.Fatal("chromium is not installed (apt-get install chromium; make test installs it)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// browser is a headless chromium with a fresh profile; each call to tab
// opens an isolated window (its own cookies): another operator.
func browser(t *testing.T) func() (context.Context, context.CancelFunc) {
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	return func() (context.Context, context.CancelFunc) {
		ctx, cancel := chromedp.NewContext(actx)
		ctx, cancel2 := context.WithTimeout(ctx, 4*time.Minute)
		return ctx, func() { cancel2(); cancel() }
	}
}

// shot saves a full-page screenshot as docs/console/<name>.png when
// PAYSCHED_CONSOLE_SHOTS names the directory (make console-shots).
func shot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("PAYSCHED_CONSOLE_SHOTS")
	if dir == "" {
		return
	}
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

func devLogin(base, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(base+"/console/login"),
		chromedp.WaitVisible("#name"),
		chromedp.SetValue("#name", name),
		chromedp.SetValue("#role", "admin"),
		chromedp.Click("#login"),
		chromedp.WaitVisible("#counts"),
	)
}

// text runs steps, then reads the text of sel.
func text(ctx context.Context, sel string, steps ...chromedp.Action[chromedp.Void]) (string, error) {
	if err := chromedp.Do(ctx, steps...); err != nil {
		return "", err
	}
	return chromedp.Run(ctx, chromedp.Text(sel))
}

// TestConsoleInABrowser drives the console of a real admin-api, beside a
// real sweeper, executor and gateway-sim, in Debian's chromium: log in,
// search, open a payment and its timeline, re-drive three dead letters

// consoleStack starts gateway-sim, an executor and admin-api on a fresh,
// migrated database, as the browser tests drive them; the caller starts
// the sweeper when its payments are in place. It returns the database,
// the processes (stopped at the end), admin-api's REST address and the
// executor's address.
func consoleStack(t *testing.T) (db string, ps *procs, adminHTTP, ex string) {
	t.Helper()
	bin := build(t, "./services/migrate", "./services/admin-api", "./services/payctl", "./tools/cmd/gateway-sim",
		"./services/executor", "./services/sweeper")
	db = pgtest.NewEmptyURL(t)
	if out, err := exec.Command(filepath.Join(bin, "migrate"), "--database-url", db).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	ps = &procs{t: t, bin: bin, env: []string{"PAYSCHED_DATABASE_URL=" + db, "PAYSCHED_JWT_SECRET=e2e"}}
	t.Cleanup(ps.stopAll)
	var gw string
	adminHTTP, gw, ex = freeAddr(t), freeAddr(t), freeAddr(t)
	ps.start("gateway-sim", "gateway-sim", "--ledger", "memory", "--grpc-addr", gw, "--http-addr", freeAddr(t))
	ps.start("executor", "executor", "--grpc-addr", ex, "--http-addr", freeAddr(t), "--gateway-addr", gw)
	ps.start("admin-api", "admin-api", "--http-addr", adminHTTP, "--grpc-addr", freeAddr(t), "--metrics-addr", freeAddr(t),
		"--gateway-addr", gw)
	for _, addr := range []string{gw, ex} {
		if out, err := exec.Command(filepath.Join(bin, "payctl"), "--api", addr, "health", "--wait", "30s").CombinedOutput(); err != nil {
			ps.exited()
			t.Fatalf("health %s: %v %s", addr, err, out)
		}
	}
	return db, ps, adminHTTP, ex
}

// with a second operator's approval, and watch them complete.
func TestConsoleInABrowser(t *testing.T) {
	tab := browser(t)
	db, ps, adminHTTP, ex := consoleStack(t)
	base := "http://" + adminHTTP
	waitHTTP(t, ps, base+"/console/login")

	pool, err := pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Six payments of dora's, due a while ago; three of them dead letters
	// (as a PSP incident leaves them: retries spent, nothing charged).
	ids := schedule(t, pool, "dora", 6, time.Now().Add(-time.Minute))
	if _, err := pool.Exec(context.Background(), `UPDATE payments SET status = 'DEAD_LETTERED', dead_letter_reason = 'RETRIES_EXHAUSTED',
		attempt = 5 WHERE id = ANY($1)`, ids[:3]); err != nil {
		t.Fatal(err)
	}
	// The sweeper starts once they are parked: started before, it could
	// claim and charge them first (they were due).
	ps.start("sweeper", "sweeper", "--http-addr", freeAddr(t), "--executors", ex, "--interval", "100ms")

	alice, closeAlice := tab()
	defer closeAlice()
	if err := chromedp.Do(alice, devLogin(base, "alice")); err != nil {
		t.Fatalf("alice logs in: %v", err)
	}
	shot(t, alice, "overview")
	got, err := text(alice, "#results",
		chromedp.Navigate(base+"/console/payments"),
		chromedp.SetValue("#payer", "dora"),
		chromedp.Click("#search"),
		chromedp.WaitVisible("#results"))
	if err != nil {
		t.Fatalf("search: %v", err)
	}
	for _, id := range ids {
		if !strings.Contains(got, id.String()) {
			t.Fatalf("the search does not list %s:\n%s", id, got)
		}
	}
	shot(t, alice, "payments")
	got, err = text(alice, "#timeline",
		chromedp.Click(`a[href="/console/payments/`+ids[0].String()+`"]`),
		chromedp.WaitVisible("#timeline"))
	if err != nil {
		t.Fatalf("open a payment: %v", err)
	}
	if !strings.Contains(got, "created") {
		t.Fatalf("timeline:\n%s", got)
	}
	shot(t, alice, "payment")

	// Re-drive the three dead letters: tick them, count and review, ask.
	tasks := []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/console/dead-letters"), chromedp.WaitVisible("#dead")}
	for _, id := range ids[:3] {
		tasks = append(tasks, chromedp.Click("#pick-"+id.String()))
	}
	tasks = append(tasks,
		chromedp.SetValue("#action", "REDRIVE"),
		chromedp.SetValue("#reason-text", "PSP incident over"))
	if err := chromedp.Do(alice, tasks...); err != nil {
		t.Fatalf("dead letters: %v", err)
	}
	shot(t, alice, "dead-letters")
	got, err = text(alice, "#summary", chromedp.Click("#preview"), chromedp.WaitVisible("#summary"))
	if err != nil {
		t.Fatalf("review: %v", err)
	}
	if !strings.Contains(got, "3 payments") {
		t.Fatalf("the review does not count 3: %s", got)
	}
	shot(t, alice, "confirm")
	state, err := text(alice, "#state", chromedp.Click("#confirm"), chromedp.WaitVisible("#state"))
	if err != nil {
		t.Fatalf("ask: %v", err)
	}
	requestURL, err := chromedp.Run(alice, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if state != "AWAITING_APPROVAL" {
		t.Fatalf("request state %q", state)
	}
	shot(t, alice, "request-awaiting")
	approveButtons, err := chromedp.Run(alice, chromedp.Evaluate[int](`document.querySelectorAll("#approve").length`))
	if err != nil || approveButtons != 0 {
		t.Fatalf("alice is offered to approve her own request (%d, %v)", approveButtons, err)
	}

	// Bob, another admin in another window, approves; all three complete.
	bob, closeBob := tab()
	defer closeBob()
	if err := chromedp.Do(bob, devLogin(base, "bob"), chromedp.Navigate(requestURL),
		chromedp.WaitVisible("#approve"), chromedp.Click("#approve")); err != nil {
		t.Fatalf("bob approves: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if state, err = text(alice, "#state", chromedp.Navigate(requestURL)); err != nil {
			t.Fatal(err)
		}
		if state == "DONE" {
			break
		}
		if time.Now().After(deadline) {
			ps.exited()
			t.Fatalf("the request is %s after a minute", state)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if got, err = text(alice, "#progress"); err != nil || !strings.HasPrefix(got, "3 done, 0 refused") {
		refusals, _ := chromedp.Run(alice, chromedp.Text("main"))
		t.Fatalf("progress %q %v\n%s", got, err, refusals)
	}
	shot(t, alice, "request-done")
	for _, id := range ids[:3] {
		for {
			if state, err = text(alice, "#status", chromedp.Navigate(base+"/console/payments/"+id.String())); err != nil {
				t.Fatal(err)
			}
			if state == "COMPLETED" {
				break
			}
			if time.Now().After(deadline) {
				ps.exited()
				t.Fatalf("%s is %s after a minute", id, state)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	if got, err = text(alice, "#timeline"); err != nil ||
		!strings.Contains(got, "REDRIVE by admin:console:alice") || !strings.Contains(got, "approved by bob") {
		t.Fatalf("the audit of the re-drive does not name both operators: %v\n%s", err, got)
	}
	shot(t, alice, "payment-completed")
	for _, page := range []string{"gateway", "reconciliation", "requests", "actions", "tenants"} {
		if err := chromedp.Do(alice, chromedp.Navigate(base+"/console/"+page), chromedp.WaitVisible("main")); err != nil {
			t.Fatal(err)
		}
		shot(t, alice, page)
	}
	if err := chromedp.Do(alice, chromedp.Navigate(base+"/console/"), chromedp.WaitVisible("#counts")); err != nil {
		t.Fatal(err)
	}
	shot(t, alice, "overview")
	// The same page as a browser that prefers dark shows it.
	if os.Getenv("PAYSCHED_CONSOLE_SHOTS") != "" {
		dark := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia,
				emulation.SetEmulatedMediaParams{Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
			return err
		})
		if err := chromedp.Do(alice, dark, chromedp.Reload(), chromedp.WaitVisible("#counts")); err != nil {
			t.Fatal(err)
		}
		shot(t, alice, "overview-dark")
	}
}

// TestConsoleOIDCInABrowser logs in through an in-test OIDC provider in
// chromium: the authorization code flow with PKCE, the provider's
// redirect back, and the Strict session cookie on the next page.
func TestConsoleOIDCInABrowser(t *testing.T) {
	tab := browser(t)
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown() }()
	m.QueueUser(&mockoidc.MockUser{Subject: "u-7", PreferredUsername: "grace", Groups: []string{"viewer"}})
	pool, err := pgxpool.New(context.Background(), pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	cfg := m.Config()
	c, err := console.New(context.Background(), console.Config{SessionKey: []byte(strings.Repeat("o", 32)),
		OIDC: &login.OIDCConfig{Issuer: cfg.Issuer, ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret,
			RedirectURL: base + "/console/login/callback", RolesClaim: "groups", Scopes: []string{"groups"}}},
		pool, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = c
	srv.Start()
	defer srv.Close()
	ctx, cancel := tab()
	defer cancel()
	who, err := text(ctx, "#who",
		chromedp.Navigate(base+"/console/gateway"),
		chromedp.WaitVisible("#sso"),
		chromedp.Click("#sso"),
		chromedp.WaitVisible("#who"))
	if err != nil {
		t.Fatalf("OIDC login: %v", err)
	}
	if who != "grace (viewer)" {
		t.Fatalf("logged in as %q", who)
	}
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.HasSuffix(loc, "/console/gateway") {
		t.Fatalf("landed on %q, want the page asked for", loc)
	}
}

func waitHTTP(t *testing.T, ps *procs, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			ps.exited()
			t.Fatalf("%s did not answer: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func schedule(t *testing.T, pool *pgxpool.Pool, payer string, n int, due time.Time) []uuid.UUID {
	t.Helper()
	var items []store.NewPayment
	var ids []uuid.UUID
	for i := range n {
		id, _ := uuid.NewV7()
		items = append(items, store.NewPayment{ID: id, Payer: payer, Payee: fmt.Sprint("shop-", i), Amount: int64(1000 + i),
			Currency: "EUR", DueAt: due, CreatedAt: time.Now(), IdempotencyKey: id.String(), RequestHash: []byte{1},
			Response: []byte{1}, Tenant: payer})
		ids = append(ids, id)
	}
	if _, err := store.NewStore(pool).Create(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestConsoleHoldsInABrowser: an operator stops three PENDING payments
// from the search page (a mistaken payroll), a second operator approves,
// and the sweeper started beside them does not execute them; then the
// same three are released, again with approval, and execute.
func TestConsoleHoldsInABrowser(t *testing.T) {
	tab := browser(t)
	db, ps, adminHTTP, ex := consoleStack(t)
	base := "http://" + adminHTTP
	waitHTTP(t, ps, base+"/console/login")
	pool, err := pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Three of erin's payments, due already. No sweeper runs until they
	// are held, however long the operators take on a loaded machine (a
	// hold racing a claim is the engine tests' matter, not the console's).
	ids := schedule(t, pool, "erin", 3, time.Now())

	alice, closeAlice := tab()
	defer closeAlice()
	bob, closeBob := tab()
	defer closeBob()
	if err := chromedp.Do(alice, devLogin(base, "alice")); err != nil {
		t.Fatalf("alice logs in: %v", err)
	}
	if err := chromedp.Do(bob, devLogin(base, "bob")); err != nil {
		t.Fatalf("bob logs in: %v", err)
	}
	// erin's tenant page: three due now; alice asks for weight 3, bob
	// approves on the same page, and it applies.
	got, err := text(alice, "#due", chromedp.Navigate(base+"/console/tenants/erin"), chromedp.WaitVisible("#tenant"))
	if err != nil || got != "3" {
		t.Fatalf("the tenant page says %q due now (%v), want 3", got, err)
	}
	if err := chromedp.Do(alice, chromedp.SetValue("#weight-in", "3"), chromedp.SetValue("#reason-in", "payroll week"),
		// The table is on the page before the post too: wait for the
		// request's own row (a state cell), or bob may load the page
		// before the post lands and wait for a button that never comes.
		chromedp.Click("#request-limits"), chromedp.WaitVisible("#limit-requests td.state")); err != nil {
		t.Fatalf("alice asks for weight 3: %v", err)
	}
	shot(t, alice, "tenant")
	if err := chromedp.Do(bob, chromedp.Navigate(base+"/console/tenants/erin"),
		chromedp.WaitVisible(`button[name="decision"][value="approve"]`), chromedp.Click(`button[name="decision"][value="approve"]`)); err != nil {
		t.Fatalf("bob approves: %v", err)
	}
	// The click's form post may not have landed yet: read the page again,
	// in alice's tab, until the approval shows, or a deadline. Never in
	// bob's: a navigation there could cancel the post of his click
	// before it was sent (under load, the approval then never came).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		got, err = text(alice, "#weight", chromedp.Navigate(base+"/console/tenants/erin"), chromedp.WaitVisible("#tenant"))
		if err == nil && strings.HasPrefix(got, "3 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after bob's approval the weight is %q (%v), want 3", got, err)
		}
	}
	// act ticks the three in a search, asks for action, and has bob
	// approve; it returns when the request is DONE.
	act := func(action, shotName string) {
		t.Helper()
		tasks := []chromedp.Action[chromedp.Void]{chromedp.Navigate(base + "/console/payments"),
			chromedp.WaitVisible("#payer"), chromedp.SetValue("#payer", "erin"), chromedp.Click("#search"), chromedp.WaitVisible("#results")}
		for _, id := range ids {
			tasks = append(tasks, chromedp.Click("#pick-"+id.String()))
		}
		tasks = append(tasks, chromedp.SetValue("#action", action), chromedp.SetValue("#reason-text", "payroll file was wrong"))
		if err := chromedp.Do(alice, tasks...); err != nil {
			t.Fatalf("%s: tick: %v", action, err)
		}
		shot(t, alice, shotName)
		got, err := text(alice, "#summary", chromedp.Click("#preview"), chromedp.WaitVisible("#summary"))
		if err != nil || !strings.Contains(got, "3 payments") {
			t.Fatalf("%s: the review says %q (%v), want 3 payments", action, got, err)
		}
		state, err := text(alice, "#state", chromedp.Click("#confirm"), chromedp.WaitVisible("#state"))
		if err != nil || state != "AWAITING_APPROVAL" {
			t.Fatalf("%s: request %q (%v), want AWAITING_APPROVAL", action, state, err)
		}
		requestURL, err := chromedp.Run(alice, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(bob, chromedp.Navigate(requestURL), chromedp.WaitVisible("#approve"), chromedp.Click("#approve")); err != nil {
			t.Fatalf("%s: bob approves: %v", action, err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for state != "DONE" {
			if time.Now().After(deadline) {
				ps.exited()
				t.Fatalf("%s: the request is %s after a minute", action, state)
			}
			time.Sleep(300 * time.Millisecond)
			if state, err = text(alice, "#state", chromedp.Navigate(requestURL)); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := text(alice, "#progress"); err != nil || !strings.HasPrefix(got, "3 done, 0 refused") {
			page, _ := chromedp.Run(alice, chromedp.Text("main"))
			t.Fatalf("%s: progress %q %v\n%s", action, got, err, page)
		}
	}
	statusOf := func(id uuid.UUID) string {
		t.Helper()
		st, err := text(alice, "#status", chromedp.Navigate(base+"/console/payments/"+id.String()))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	act("HOLD", "payments-hold")
	for _, id := range ids {
		if st := statusOf(id); st != "HELD" {
			t.Fatalf("%s is %s after the hold, want HELD", id, st)
		}
	}
	shot(t, alice, "payment-held")
	// The sweeper starts, with one more of erin's payments due beside the
	// three: it charges that one, proof that it swept erin's due
	// payments, and leaves the three held alone. Meanwhile the overview,
	// left open, refreshes itself in place (no reload).
	if err := chromedp.Do(alice, chromedp.Navigate(base+"/console/"), chromedp.WaitVisible("#counts")); err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	witness := schedule(t, pool, "erin", 1, time.Now())[0]
	ps.start("sweeper", "sweeper", "--http-addr", freeAddr(t), "--executors", ex, "--interval", "100ms")
	st := store.NewStore(pool)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p, err := st.GetAny(context.Background(), witness)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status == payment.Completed {
			break
		}
		if time.Now().After(deadline) {
			ps.exited()
			t.Fatalf("erin's unheld payment is %s a minute after the sweeper started", p.Status)
		}
	}
	time.Sleep(time.Until(opened.Add(12 * time.Second)))
	refreshed, err := chromedp.Run(alice, chromedp.Evaluate[string](`document.getElementById("main").dataset.refreshedAt || ""`))
	if err != nil || refreshed == "" {
		t.Fatalf("the overview did not refresh itself in 12 s (%v)", err)
	}
	for _, id := range ids {
		if st := statusOf(id); st != "HELD" {
			t.Fatalf("%s is %s past its due time while held, want HELD", id, st)
		}
	}
	act("RELEASE", "payments-release")
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		for st := statusOf(id); st != "COMPLETED"; st = statusOf(id) {
			if time.Now().After(deadline) {
				ps.exited()
				t.Fatalf("%s is %s a minute after its release", id, st)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	got, err = text(alice, "#timeline")
	if err != nil || !strings.Contains(got, "HOLD by admin:console:alice") || !strings.Contains(got, "RELEASE by admin:console:alice") ||
		!strings.Contains(got, "approved by bob") {
		t.Fatalf("the timeline does not show the hold and the release, approved: %v\n%s", err, got)
	}
}
