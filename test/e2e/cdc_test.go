package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/freeport"
	"github.com/paysched/paysched/test/kafkatest"
	"github.com/paysched/paysched/test/pgtest"
)

// TestCDCSurvivesKills streams row changes through the real kafka, cdc and
// audit-consumer binaries while each is killed -9 (kafka keeping its data
// directory) and restarted: every change reaches Kafka and the audit log,
// and redeliveries add nothing to the audit log.
func TestCDCSurvivesKills(t *testing.T) {
	bin := build(t, "./services/migrate", "./tools/cmd/kafka", "./services/cdc", "./services/audit-consumer")
	// The audit log in its own database, as production has it.
	db, auditDB := pgtest.NewEmptyURL(t), pgtest.NewEmptyURL(t)
	if out, err := exec.Command(filepath.Join(bin, "migrate"), "--database-url", db, "--audit-database-url", auditDB).CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	ps := &procs{t: t, bin: bin, env: []string{"PAYSCHED_DATABASE_URL=" + db}}
	defer ps.stopAll()
	port := freePort(t)
	brokers := fmt.Sprintf("127.0.0.1:%d", port)
	dataDir := t.TempDir()
	startKafka := func() *proc {
		return ps.start("kafka", "kafka", "--kafka-port", fmt.Sprint(port), "--kafka-data-dir", dataDir, "--http-addr", freeAddr(t))
	}
	cdcHTTP := freeAddr(t)
	startCDC := func() *proc {
		// A slot of its own: slot names are the cluster's, and other test
		// packages stream from other databases of it at the same time.
		return ps.start("cdc", "cdc", "--kafka-brokers", brokers, "--http-addr", cdcHTTP, "--status-interval", "200ms", "--heartbeat-interval", "1s",
			"--slot", "e2e_cdc")
	}
	startAudit := func() *proc {
		return ps.start("audit-consumer", "audit-consumer", "--kafka-brokers", brokers, "--http-addr", freeAddr(t), "--audit-database-url", auditDB)
	}
	k := startKafka()
	time.Sleep(500 * time.Millisecond)
	cdcP, auditP := startCDC(), startAudit()

	pool, err := pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	logPool, err := pgxpool.New(context.Background(), auditDB)
	if err != nil {
		t.Fatal(err)
	}
	defer logPool.Close()
	ctx := context.Background()
	st := store.NewStore(pool)
	writes := 0
	write := func(n int) {
		for range n {
			id, _ := uuid.NewV7()
			if _, err := st.Create(ctx, []store.NewPayment{{ID: id, Payer: "p", Payee: "q", Amount: 1, Currency: "USD",
				DueAt: time.Now().Add(time.Hour), CreatedAt: time.Now(), IdempotencyKey: id.String(), RequestHash: []byte{1}, Response: []byte{1}}}); err != nil {
				t.Fatal(err)
			}
			writes++
		}
	}
	// cdc serves HTTP once its slot is made. Seeing the slot in
	// pg_replication_slots is not enough: until its creation finishes the
	// slot is ephemeral, and killing cdc then drops it (the CI run that lost
	// 500 changes here did that).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + cdcHTTP + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("cdc never became healthy")
		}
	}
	// And the pipeline is live once a first change reaches the audit log.
	write(1)
	waitAudited := func(want int, within time.Duration, each func()) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			each()
			var audited int
			if err := logPool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE table_name = 'payments'`).Scan(&audited); err != nil {
				t.Fatal(err)
			}
			if audited == want {
				return
			}
			if audited > want {
				t.Fatalf("audit log has %d rows for %d changes: duplicates got in", audited, want)
			}
			if time.Now().After(deadline) {
				for _, p := range ps.all {
					t.Logf("%s:\n%s", p.name, tail(p.out.String()))
				}
				t.Fatalf("audit log has %d of %d changes", audited, want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitAudited(1, 60*time.Second, func() {})
	write(200)
	_ = cdcP.signal(t, syscall.SIGKILL)
	write(200) // while cdc is down
	cdcP = startCDC()
	write(100)
	_ = auditP.signal(t, syscall.SIGKILL)
	write(100)
	auditP = startAudit()
	time.Sleep(time.Second)
	_ = k.signal(t, syscall.SIGKILL) // kafka dies; its data directory stays
	write(100)
	_ = startKafka() // stopped with the test (its cleanup)
	write(100)
	// Like a supervisor (Kubernetes) would: a process that exits because
	// Kafka went away is started again; the slot and the group keep its place.
	supervise := func() {
		for _, p := range []struct {
			proc  **proc
			start func() *proc
		}{{&cdcP, startCDC}, {&auditP, startAudit}} {
			select {
			case <-(*p.proc).done:
				t.Logf("%s exited (kafka restarted); starting it again", (*p.proc).name)
				*p.proc = p.start()
			default:
			}
		}
	}

	// Everything arrives: the audit log has one row per change.
	waitAudited(writes, 90*time.Second, supervise)
	// And Kafka holds every change (duplicates allowed, none missing).
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(kafka.DefaultTopics.Payments), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lsns := map[uint64]bool{}
	total := 0
	kafkatest.Drain(ctx, cl, nil, func(r *kgo.Record) {
		total++
		var e struct{ Source struct{ LSN uint64 } }
		_ = json.Unmarshal(r.Value, &e)
		lsns[e.Source.LSN] = true
	})
	t.Logf("%d changes, %d events in Kafka (%d duplicates)", writes, total, total-len(lsns))
	if len(lsns) != writes {
		t.Fatalf("Kafka has %d distinct changes, want %d", len(lsns), writes)
	}
}

func freePort(t *testing.T) int {
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}
