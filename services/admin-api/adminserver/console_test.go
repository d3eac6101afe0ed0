package adminserver_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/pkg/api/server"
	"github.com/paysched/paysched/pkg/console"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/services/admin-api/adminserver"
	"github.com/paysched/paysched/test/pgtest"
)

// slowReport is a gateway whose settlement report waits for release: a
// reconciliation run stays in flight until the test lets it finish.
type slowReport struct {
	gatewayv1.UnimplementedGatewayServiceServer
	release chan struct{}
	asked   chan struct{}
}

func (g *slowReport) GetCharge(ctx context.Context, _ *gatewayv1.GetChargeRequest) (*gatewayv1.GetChargeResponse, error) {
	_ = grpc.SetHeader(ctx, metadata.Pairs("date", time.Now().UTC().Format(http.TimeFormat)))
	return nil, status.Error(codes.NotFound, "none")
}

func (g *slowReport) ListSettlements(ctx context.Context, _ *gatewayv1.ListSettlementsRequest) (*gatewayv1.ListSettlementsResponse, error) {
	select {
	case g.asked <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &gatewayv1.ListSettlementsResponse{}, nil
}

// adminEnv is an admin-api serving the console in development mode.
type adminEnv struct {
	t    *testing.T
	base string
	cc   *grpc.ClientConn
	db   *pgxpool.Pool
}

func startAdmin(t *testing.T, gw gatewayv1.GatewayServiceServer, rate ratelimit.Config) *adminEnv {
	t.Helper()
	url := pgtest.NewURL(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, gw)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cfg := adminserver.Config{DatabaseURL: url, DBMaxConns: 8, RateLimit: rate,
		Auth:    auth.Config{HS256Secret: []byte("secret"), Issuer: auth.DefaultIssuer, AdminAudience: auth.DefaultAdminAudience},
		Gateway: &dial.Flags{Kind: dial.KindGRPC, Addr: lis.Addr().String()},
		Console: &console.Config{Dev: true, SessionKey: []byte(strings.Repeat("k", 32))}}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := adminserver.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	cc, err := grpc.NewClient(l.GRPC.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(); db.Close(); cancel(); _ = <-done })
	return &adminEnv{t: t, base: "http://" + l.HTTP.Addr().String(), cc: cc, db: db}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// browser is a logged-in console user: its cookies (Secure, which a cookie
// jar would not send over plain HTTP) and its CSRF token.
type browser struct {
	e       *adminEnv
	cookies []*http.Cookie
	csrf    string
}

func (e *adminEnv) do(b *browser, method, path string, form url.Values) *http.Response {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, e.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, c := range b.cookies {
		req.AddCookie(c)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// login logs name in with the development login, as a browser does.
func (e *adminEnv) login(name, role string) *browser {
	e.t.Helper()
	b := &browser{e: e}
	res := e.do(b, http.MethodGet, "/console/login", nil)
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	b.cookies = res.Cookies()
	m := csrfField.FindSubmatch(page)
	if m == nil {
		e.t.Fatal("no CSRF field on the login page")
	}
	res = e.do(b, http.MethodPost, "/console/login/dev", url.Values{"csrf": {string(m[1])}, "name": {name}, "role": {role}, "next": {"/console/"}})
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		e.t.Fatalf("login: %d", res.StatusCode)
	}
	b.cookies = res.Cookies()
	res = e.do(b, http.MethodGet, "/console/", nil)
	page, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if m = csrfField.FindSubmatch(page); m == nil {
		e.t.Fatalf("no CSRF token on the overview (%d)", res.StatusCode)
	}
	b.csrf = string(m[1])
	return b
}

func (b *browser) post(path string, form url.Values) int {
	form.Set("csrf", b.csrf)
	res := b.e.do(b, http.MethodPost, path, form)
	res.Body.Close()
	return res.StatusCode
}

// deadLetters makes n dead letters.
func (e *adminEnv) deadLetters(n int) []uuid.UUID {
	e.t.Helper()
	var items []store.NewPayment
	var ids []uuid.UUID
	for range n {
		id, _ := uuid.NewV7()
		items = append(items, store.NewPayment{ID: id, Payer: "alice", Payee: "bob", Amount: 100, Currency: "EUR",
			DueAt: time.Now().Add(-time.Minute), CreatedAt: time.Now(), IdempotencyKey: id.String()})
		ids = append(ids, id)
	}
	if _, err := store.NewStore(e.db).Create(context.Background(), items); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.db.Exec(context.Background(), `UPDATE payments SET status = 'DEAD_LETTERED', dead_letter_reason = 'RETRIES_EXHAUSTED', attempt = 1
		WHERE id = ANY($1)`, ids); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// TestConsoleActionsGoThroughTheAPILimiter: an operator's console actions
// count against the same per-operator limit as the REST API's calls: past
// it the console answers 429, however the work is split.
func TestConsoleActionsGoThroughTheAPILimiter(t *testing.T) {
	e := startAdmin(t, &slowReport{release: make(chan struct{}), asked: make(chan struct{}, 1)}, ratelimit.Config{Rate: 0.001, Burst: 2})
	ids := e.deadLetters(3)
	otto := e.login("otto", "operator")
	var codes []int
	for _, id := range ids {
		codes = append(codes, otto.post("/console/payments/"+id.String()+"/action", url.Values{"action": {"RESOLVE"}, "reason": {"paid by wire"}}))
	}
	if codes[0] != http.StatusSeeOther || codes[1] != http.StatusSeeOther || codes[2] != http.StatusTooManyRequests {
		t.Fatalf("three single actions at a limit of two: %v, want 303 303 429", codes)
	}
}

// TestOneReconciliationRunPerDay: at most one run of a day is in flight;
// a second start, from the console or the API, is answered "already
// running" at once, nothing queued behind it; once the run ends another
// may start.
func TestOneReconciliationRunPerDay(t *testing.T) {
	gw := &slowReport{release: make(chan struct{}), asked: make(chan struct{}, 1)}
	e := startAdmin(t, gw, ratelimit.Config{})
	otto := e.login("otto", "operator")
	day := time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly)
	if code := otto.post("/console/reconciliation", url.Values{"day": {day}}); code != http.StatusSeeOther {
		t.Fatalf("first start: %d", code)
	}
	select {
	case <-gw.asked:
	case <-time.After(60 * time.Second):
		t.Fatal("the run never asked for the report")
	}
	if code := otto.post("/console/reconciliation", url.Values{"day": {day}}); code != http.StatusConflict {
		t.Fatalf("a second start while the first runs: %d, want 409 (already running)", code)
	}
	tok, err := auth.Mint([]byte("secret"), auth.DefaultIssuer, auth.DefaultAdminAudience, "ops", true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok), 20*time.Second)
	defer cancel()
	_, err = payschedv1.NewAdminServiceClient(e.cc).TriggerReconciliationRun(ctx, &payschedv1.TriggerReconciliationRunRequest{Day: day})
	if status.Code(err) != codes.FailedPrecondition || apierr.Reason(err) != apierr.ReasonRunInProgress {
		t.Fatalf("the API's start while the console's runs: %v, want FAILED_PRECONDITION %s", err, apierr.ReasonRunInProgress)
	}
	close(gw.release)
	deadline := time.Now().Add(60 * time.Second)
	for {
		var running int
		if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_runs WHERE state = 'RUNNING'`).Scan(&running); err != nil {
			t.Fatal(err)
		}
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run did not finish")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := otto.post("/console/reconciliation", url.Values{"day": {day}}); code != http.StatusSeeOther {
		t.Fatalf("a start after the run ended: %d", code)
	}
	var runs int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_runs`).Scan(&runs); err != nil || runs < 1 {
		t.Fatalf("%d runs (%v)", runs, err)
	}

}
