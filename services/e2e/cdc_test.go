package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/kafka"
	"github.com/paysched/paysched/pkg/kafkatest"
	"github.com/paysched/paysched/pkg/pgtest"
	"github.com/paysched/paysched/pkg/schedule"
)

// TestCDCSurvivesKills streams row changes through the real kafka, cdc and
// audit-consumer binaries while each is killed -9 (kafka keeping its data
// directory) and restarted: every change reaches Kafka and the audit log,
// and redeliveries add nothing to the audit log.
func TestCDCSurvivesKills(t *testing.T) {
	bin := build(t, "./services/migrate", "./services/kafka", "./services/cdc", "./services/audit-consumer")
	db := pgtest.NewEmptyURL(t)
	if out, err := exec.Command(filepath.Join(bin, "migrate"), "--database-url", db).CombinedOutput(); err != nil {
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
	startCDC := func() *proc {
		return ps.start("cdc", "cdc", "--kafka-brokers", brokers, "--http-addr", freeAddr(t), "--status-interval", "200ms", "--heartbeat-interval", "1s")
	}
	startAudit := func() *proc {
		return ps.start("audit-consumer", "audit-consumer", "--kafka-brokers", brokers, "--http-addr", freeAddr(t))
	}
	k := startKafka()
	time.Sleep(500 * time.Millisecond)
	cdcP, auditP := startCDC(), startAudit()

	pool, err := pgxpool.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	// Wait for the slot, so every change below is captured.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'paysched_cdc'`).Scan(&n)
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no replication slot")
		}
	}
	store := schedule.NewStore(pool)
	writes := 0
	write := func(n int) {
		for range n {
			id, _ := uuid.NewV7()
			if _, err := store.Create(ctx, []schedule.NewPayment{{ID: id, Payer: "p", Payee: "q", Amount: 1, Currency: "USD",
				DueAt: time.Now().Add(time.Hour), CreatedAt: time.Now(), IdempotencyKey: id.String(), RequestHash: []byte{1}, Response: []byte{1}}}); err != nil {
				t.Fatal(err)
			}
			writes++
		}
	}
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
	k = startKafka()
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
	deadline := time.Now().Add(90 * time.Second)
	for {
		supervise()
		var audited int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE table_name = 'payments'`).Scan(&audited); err != nil {
			t.Fatal(err)
		}
		if audited == writes {
			break
		}
		if audited > writes {
			t.Fatalf("audit log has %d rows for %d changes: duplicates got in", audited, writes)
		}
		if time.Now().After(deadline) {
			for _, p := range ps.all {
				t.Logf("%s:\n%s", p.name, tail(p.out.String()))
			}
			t.Fatalf("audit log has %d of %d changes", audited, writes)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// And Kafka holds every change (duplicates allowed, none missing).
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(kafka.TopicPayments), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
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
	var port int
	fmt.Sscanf(freeAddr(t)[len("127.0.0.1:"):], "%d", &port)
	return port
}
