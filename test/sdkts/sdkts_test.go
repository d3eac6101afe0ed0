// Package sdkts builds and tests the TypeScript SDK (sdk/ts): its types
// regenerated from the OpenAPI document must match the committed ones, it
// compiles under tsc --strict, its tests pass on Node's test runner
// against stand-in servers and a real payments-api (started here in
// process), it verifies a delivery the webhook-dispatcher's signer signed
// during a rotation, and `npm pack` makes a package with its types and
// exports.
package sdkts_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/test/apitest"
	"github.com/paysched/paysched/test/kafkatest"
	"github.com/paysched/paysched/test/nodetest"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// sdk is the package's folder.
var sdk = filepath.Join("..", "..", "sdk", "ts")

// sources are the package's files, as committed.
func sources(t *testing.T) []string {
	t.Helper()
	files := []string{"package.json", "package-lock.json", "tsconfig.json", "README.md"}
	for _, glob := range []string{"src/*.ts", "src/test/*.ts"} {
		m, err := filepath.Glob(filepath.Join(sdk, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(sdk, f)
			files = append(files, rel)
		}
	}
	return files
}

func TestTheTypeScriptSDK(t *testing.T) {
	nodetest.Require(t, "the TypeScript SDK's test", "node", "npm", "npx")
	dir := nodetest.InstallFrom(t, sdk, sources(t)...)

	// The types are the document's.
	doc, _ := filepath.Abs(filepath.Join("..", "..", "gen", "openapi", "paysched", "v1", "payments.openapi3.json"))
	fresh := filepath.Join(dir, "fresh-schema.ts")
	nodetest.Run(t, dir, nil, "npx", "--no-install", "openapi-typescript", doc, "-o", fresh)
	want, _ := os.ReadFile(fresh)
	got, _ := os.ReadFile(filepath.Join(dir, "src", "schema.ts"))
	if string(got) != string(want) {
		t.Fatal("sdk/ts/src/schema.ts is stale: run `npm run generate` in sdk/ts (make proto regenerates the document)")
	}
	nodetest.Run(t, dir, nil, "npx", "--no-install", "tsc", "-p", "tsconfig.json")

	// A delivery as the webhook-dispatcher signs it during a rotation.
	oldSecret, newSecret := tenanthook.NewSymmetricSecret(), tenanthook.NewSymmetricSecret()
	body := `{"type":"paysched.payment.completed","timestamp":"2026-12-07T09:00:00Z","data":{"paymentId":"p1","note":"café"}}`
	ts := time.Now().Unix()
	sig, err := tenanthook.Sign([]string{oldSecret, newSecret}, "msg_1", ts, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	signed, _ := json.Marshal(map[string]any{"secrets": []string{oldSecret, newSecret}, "body": body,
		"headers": map[string]string{"webhook-id": "msg_1", "webhook-timestamp": strconv.FormatInt(ts, 10), "webhook-signature": sig}})

	base := apitest.Start(t)
	ops, _ := filepath.Abs(filepath.Join("..", "..", "sdk", "operations.json"))
	out := nodetest.Run(t, dir, []string{"PAYSCHED_BASE=" + base, "PAYSCHED_OPERATIONS=" + ops, "PAYSCHED_TOKEN=" + apitest.Token(t, "rita", ""),
		"PAYSCHED_TOKEN_LOST=" + apitest.Token(t, "sam", ""), "PAYSCHED_TOKEN_TENANT=" + apitest.Token(t, "tina", "acme"),
		"PAYSCHED_SIGNED=" + string(signed)}, "node", "--test", "dist/test/")
	if !strings.Contains(out, "# fail 0") || !strings.Contains(out, "# skipped 0") {
		t.Fatalf("node --test:\n%s", out)
	}

	// A delivery the webhook-dispatcher makes, received and verified by
	// the SDK.
	receiveWithTheSDK(t, dir)

	// The package: its code, its types and its exports, no tests.
	var packs []struct {
		Files []struct{ Path string } `json:"files"`
	}
	// prepack builds first (its lines come before the JSON).
	packed := nodetest.Run(t, dir, nil, "npm", "pack", "--dry-run", "--json")
	if i := strings.Index(packed, "\n["); i >= 0 {
		packed = packed[i+1:]
	}
	if err := json.Unmarshal([]byte(packed), &packs); err != nil || len(packs) != 1 {
		t.Fatalf("npm pack: %v\n%s", err, packed)
	}
	var paths []string
	for _, f := range packs[0].Files {
		paths = append(paths, f.Path)
	}
	for _, w := range []string{"package.json", "README.md", "dist/index.js", "dist/index.d.ts", "dist/webhook.js", "dist/webhook.d.ts",
		"dist/schema.d.ts", "dist/errors.d.ts", "dist/retry.d.ts"} {
		if !slices.Contains(paths, w) {
			t.Errorf("the package lacks %s: %v", w, paths)
		}
	}
	for _, p := range paths {
		if strings.Contains(p, "test") {
			t.Errorf("the package holds a test: %s", p)
		}
	}
}

// receiveWithTheSDK runs receive.mjs (the SDK's verifier) as a tenant's
// endpoint with a rotated secret (the dispatcher signs with both; the
// receiver holds the new one), sends notifications through Kafka (kfake)
// into a real webhook-dispatcher, and waits until each is delivered and
// verified.
func receiveWithTheSDK(t *testing.T, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := os.ReadFile("receive.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "receive.mjs"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewPool(t)
	ep, _, err := tenanthook.CreateEndpoint(ctx, db, tenanthook.Endpoint{Tenant: "acme", URL: "http://127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := tenanthook.RotateSecret(ctx, db, "acme", ep.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "deliveries.jsonl")
	node := exec.CommandContext(ctx, "node", "receive.mjs")
	node.Dir = dir
	node.Env = append(os.Environ(), "SECRET="+secret, "LOG="+logPath)
	node.Stderr = os.Stderr
	out, err := node.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = node.Process.Kill(); _ = node.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("receiver: %q %v", line, err)
	}
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET url = $2 WHERE id = $1`, ep.ID, "http://127.0.0.1:"+port+"/hook"); err != nil {
		t.Fatal(err)
	}
	topics := kafka.DefaultTopics
	seeds := kafkatest.NewCluster(t, topics.Notifications)
	d, err := tenanthook.New(tenanthook.Config{Brokers: seeds, Group: tenanthook.Group, Topics: topics,
		Egress: tenanthook.Egress{Loopback: true, Timeout: 10 * time.Second}},
		db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() { stop(); _ = <-done }()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 5
	for i := range n {
		id := fmt.Sprintf("0197a000-0000-7000-8000-%012d", i)
		body := `{"paymentId":"` + id + `", "note":"café \"ü\" ` + strings.Repeat("x", i) + `"}`
		rec := &kgo.Record{Topic: topics.Notifications, Key: []byte(id), Value: []byte(body), Headers: []kgo.RecordHeader{
			{Key: "ce_id", Value: []byte(id)}, {Key: "ce_type", Value: []byte("paysched.payment.completed")},
			{Key: "ce_time", Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))}, {Key: "ce_tenant", Value: []byte("acme")}}}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for {
		b, _ := os.ReadFile(logPath)
		verified := 0
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			var r struct {
				OK    bool
				Error string
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("receiver log %q: %v", l, err)
			}
			if !r.OK {
				t.Fatalf("the SDK refused a delivery: %s", r.Error)
			}
			verified++
		}
		if verified >= n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d deliveries verified by the SDK", verified, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
