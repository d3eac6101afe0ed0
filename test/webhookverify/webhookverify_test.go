// Package webhookverify checks the webhook-dispatcher's signed deliveries
// with two verifiers nobody on the project wrote: the npm packages
// standardwebhooks and svix (receive.mjs), during a secret rotation, so
// that each delivery must verify under the old and the new secret alike;
// and with the Go SDK's (sdk/go/webhook), on a second endpoint.
// Notifications go through Kafka (kfake) into the dispatcher as in
// production.
package webhookverify_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/test/kafkatest"
	"github.com/paysched/paysched/test/nodetest"
	"github.com/paysched/paysched/test/pgtest"

	"github.com/paysched/paysched/sdk/go/webhook"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestTwoVerifiersAcceptEveryDelivery(t *testing.T) {
	nodetest.Require(t, "the webhook verification test", "node", "npm")
	dir := nodetest.Install(t, "package.json", "package-lock.json", "receive.mjs")
	db := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ep, oldSecret, err := tenanthook.CreateEndpoint(ctx, db, tenanthook.Endpoint{Tenant: "acme", URL: "http://127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	newSecret, err := tenanthook.RotateSecret(ctx, db, "acme", ep.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "deliveries.jsonl")
	node := exec.CommandContext(ctx, "node", "receive.mjs")
	node.Dir = dir
	node.Env = append(os.Environ(), "SECRETS="+oldSecret+","+newSecret, "LOG="+logPath)
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

	// A second endpoint of the tenant, received in Go and verified by the
	// Go SDK (sdk/go/webhook) with its rotated secret alone: the
	// dispatcher signs with the old and the new.
	var sdkMu sync.Mutex
	sdkSeen, sdkRefused := map[string]bool{}, []string{}
	ep2, _, err := tenanthook.CreateEndpoint(ctx, db, tenanthook.Endpoint{Tenant: "acme", URL: "http://127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	ep2Secret, err := tenanthook.RotateSecret(ctx, db, "acme", ep2.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := webhook.NewVerifier(ep2Secret)
	if err != nil {
		t.Fatal(err)
	}
	goReceiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg struct {
			Data struct{ PaymentID string } `json:"data"`
		}
		_, verr := verifier.Verify(r.Header, body)
		_ = json.Unmarshal(body, &msg)
		sdkMu.Lock()
		defer sdkMu.Unlock()
		if verr != nil {
			sdkRefused = append(sdkRefused, msg.Data.PaymentID+": "+verr.Error())
			http.Error(w, verr.Error(), http.StatusUnauthorized)
			return
		}
		sdkSeen[msg.Data.PaymentID] = true
	}))
	defer goReceiver.Close()
	if _, err := db.Exec(ctx, `UPDATE webhook_endpoints SET url = $2 WHERE id = $1`, ep2.ID, goReceiver.URL+"/hook"); err != nil {
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
	const n = 20
	want := map[string]bool{}
	for i := range n {
		id := uuid.NewString()
		want[id] = true
		// Bodies with what breaks naive verifiers: non-ASCII, escapes,
		// spacing that a re-serialiser would change.
		body := `{"paymentId":"` + id + `", "note":"café \"ü\" \u00e9 ` + strings.Repeat("x", i) + `"}`
		rec := &kgo.Record{Topic: topics.Notifications, Key: []byte(id), Value: []byte(body), Headers: []kgo.RecordHeader{
			{Key: "ce_id", Value: []byte(id)}, {Key: "ce_type", Value: []byte("paysched.payment.completed")},
			{Key: "ce_time", Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))}, {Key: "ce_tenant", Value: []byte("acme")}}}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Until every delivery has succeeded, or a verifier refused one (the
	// dispatcher would retry it for hours).
	var seen map[string]bool
	for {
		var refused []string
		seen, refused = receiverLog(t, logPath)
		if len(refused) > 0 {
			t.Fatalf("refused by a verifier: %v", refused)
		}
		sdkMu.Lock()
		if len(sdkRefused) > 0 {
			t.Fatalf("refused by the Go SDK: %v", sdkRefused)
		}
		sdkMu.Unlock()
		var succeeded int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = $1`, tenanthook.DeliveredState).Scan(&succeeded); err != nil {
			t.Fatalf("%d of %d delivered: %v", len(seen), n, err)
		}
		if succeeded == 2*n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	seen, _ = receiverLog(t, logPath)
	sdkMu.Lock()
	defer sdkMu.Unlock()
	for id := range want {
		if !seen[id] {
			t.Errorf("delivery %s never reached the receiver", id)
		}
		if !sdkSeen[id] {
			t.Errorf("delivery %s never reached the Go SDK's receiver", id)
		}
	}
}

// receiverLog is what receive.mjs logged: the ids it verified, and each
// refusal with the verifiers' reasons.
func receiverLog(t *testing.T, path string) (map[string]bool, []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	ok := map[string]bool{}
	var refused []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var r struct {
			ID       string
			OK       bool
			Failures []string
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("receiver log %q: %v", l, err)
		}
		if !r.OK {
			refused = append(refused, r.ID+": "+strings.Join(r.Failures, "; "))
			continue
		}
		ok[r.ID] = true
	}
	return ok, refused
}
