package enginetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/audit"
	"github.com/paysched/paysched/pkg/events/cdc"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
	"github.com/paysched/paysched/test/kafkatest"
)

// TestEveryChangeReachesKafkaAndTheAuditLog: 1,000 payments execute while
// the cdc connector and the audit-consumer run. Every status change reaches
// Kafka in commit order per payment, the audit log holds every attempt, and
// there is one notification (by ce_id) per creation and terminal transition.
func TestEveryChangeReachesKafkaAndTheAuditLog(t *testing.T) {
	c := newCluster(t, opts{executors: 2, sweepers: 0, batch: 100})
	c.stop() // the engine starts once the pipeline is up
	// The slot is this package's own: slot names are the cluster's, and
	// other test packages stream from other databases of it meanwhile.
	seeds := kafkatest.NewCluster(t, kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Actions, kafka.DefaultTopics.ScheduleEvents, kafka.DefaultTopics.Notifications, kafka.DefaultTopics.Heartbeat)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := cdc.New(cdc.Config{DatabaseURL: c.db.Config().ConnString(), Slot: "enginetest_cdc", Publication: "paysched",
		Source: envelope.Source{Name: "paysched", DB: c.db.Config().ConnConfig.Database}, Brokers: seeds,
		HeartbeatTopic: kafka.DefaultTopics.Heartbeat, StatusInterval: 200 * time.Millisecond, HeartbeatInterval: time.Second},
		c.db, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	ac, err := audit.New(audit.Config{Brokers: seeds, Group: "audit"}, c.db, nil, prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	// Either one stopping before the test ends is a failure to report,
	// never a silent wait for the audit log.
	done := make(chan struct{}, 2)
	var runErr atomic.Value
	run := func(name string, f func(context.Context) error) {
		if err := f(ctx); ctx.Err() == nil {
			runErr.CompareAndSwap(nil, fmt.Sprintf("%s stopped: %v", name, err))
		}
		done <- struct{}{}
	}
	go run("cdc", conn.Run)
	go run("audit-consumer", ac.Run)
	defer func() { cancel(); <-done; <-done }()

	ids := c.schedule(1000, "bob", soon())
	for i := 0; i < len(ids); i += 50 { // some declined by rule
		if _, err := c.db.Exec(ctx, `UPDATE payments SET payee = 'decline-x' WHERE id = $1`, ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	c.startSweeper("sweeper-cdc")
	c.waitTerminal(60 * time.Second)

	// The audit log catches up: every attempt row change is there.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var missing int
		err := c.db.QueryRow(ctx, `SELECT count(*) FROM payment_attempts a WHERE NOT EXISTS (
			SELECT 1 FROM audit_events e WHERE e.table_name = 'payment_attempts' AND e.payment_id = a.payment_id
			  AND (e.event::json->'after'->>'attempt')::int = a.attempt AND e.event::json->'after'->>'outcome' IS NOT NULL)`).Scan(&missing)
		if err != nil {
			t.Fatal(err)
		}
		var terminal int
		if err := c.db.QueryRow(ctx, `SELECT count(DISTINCT payment_id) FROM audit_events WHERE table_name = 'payments'
			AND status IN ('COMPLETED', 'FAILED')`).Scan(&terminal); err != nil {
			t.Fatal(err)
		}
		if missing == 0 && terminal == len(ids) {
			break
		}
		if e := runErr.Load(); e != nil {
			t.Fatal(e)
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit log behind: %d attempts missing, %d of %d terminal payments", missing, terminal, len(ids))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A move outside the execution path reaches the audit log through CDC
	// too: who, what, the previous status and why. (ids[0] was declined.)
	if _, err := store.Apply(ctx, c.db, store.OutOfBandMove{ID: ids[0], By: payment.Reconciler, To: payment.Completed,
		Actor: "admin:ops", Action: "REPAIR", Reason: "cdc check"}); err != nil {
		t.Fatal(err)
	}
	for {
		var n int
		if err := c.db.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE table_name = 'payment_actions' AND payment_id = $1
			AND event::json->'after'->>'actor' = 'admin:ops' AND event::json->'after'->>'prev_status' = 'FAILED' AND event::json->'after'->>'reason' = 'cdc check'`,
			ids[0]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the operator action never reached audit_events")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := c.db.Exec(ctx, `UPDATE audit_events SET status = 'X'`); err == nil {
		t.Fatal("audit_events accepted an UPDATE")
	}
	if _, err := c.db.Exec(ctx, `DELETE FROM audit_events`); err == nil {
		t.Fatal("audit_events accepted a DELETE")
	}

	// A recurring schedule's life reaches the audit log and the
	// notifications: its creation and its pause.
	next := time.Now().AddDate(0, 1, 0)
	sched := store.Schedule{ID: uuid.New(), Tenant: "acme", Payer: "rita", Payee: "landlord", Amount: 1000, Currency: "EUR",
		Rule: "FREQ=MONTHLY", Start: next.UTC().Format("2006-01-02T15:04:05"), Zone: "UTC", MonthEnd: "CLAMP",
		BusinessDays: "NONE", CatchUp: "SKIP_MISSED", CatchUpBound: 12, NextAt: &next}
	if _, _, err := store.CreateSchedule(ctx, c.db, sched); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.PauseSchedule(ctx, c.db, time.Now(), "rita", sched.ID, nil); err != nil {
		t.Fatal(err)
	}
	for {
		var n int
		if err := c.db.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE table_name = 'schedule_events'
			AND event::json->'after'->>'schedule_id' = $1`, sched.ID.String()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the schedule's 2 events reached audit_events", n)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Kafka: per payment, events in commit order, each change following the last.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(kafka.DefaultTopics.Payments, kafka.DefaultTopics.Notifications),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	type ev struct {
		Before, After map[string]any
		Source        struct{ LSN uint64 }
	}
	byPayment := map[string][]ev{}
	notes := map[string]string{} // ce_id -> type
	perType := map[string]int{}
	var completed, failed int
	if err := c.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FILTER (WHERE status = 'FAILED') FROM payments`).
		Scan(&completed, &failed); err != nil {
		t.Fatal(err)
	}
	failed++                                  // ids[0] was announced failed before its repair
	want := len(ids) + completed + failed + 2 // and the schedule's two
	kafkatest.Drain(ctx, cl, func() bool { return len(notes) >= want }, func(r *kgo.Record) {
		if r.Topic == kafka.DefaultTopics.Notifications {
			var id, typ string
			for _, h := range r.Headers {
				switch h.Key {
				case "ce_id":
					id = string(h.Value)
				case "ce_type":
					typ = string(h.Value)
				}
			}
			if _, dup := notes[id]; !dup {
				perType[typ]++
			}
			notes[id] = typ
			return
		}
		var e ev
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatal(err)
		}
		var key struct{ ID string }
		_ = json.Unmarshal(r.Key, &key)
		byPayment[key.ID] = append(byPayment[key.ID], e)
	})
	for _, id := range ids {
		evs := byPayment[id.String()]
		if len(evs) < 3 { // created, claimed, terminal at least
			t.Fatalf("payment %s: %d events", id, len(evs))
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Source.LSN <= evs[i-1].Source.LSN || evs[i].After["prev_status"] != evs[i-1].After["status"] {
				t.Fatalf("payment %s: event %d does not follow event %d", id, i, i-1)
			}
		}
	}
	if perType["paysched.payment.created"] != len(ids) || perType["paysched.payment.completed"] != completed ||
		perType["paysched.payment.failed"] != failed || perType["paysched.schedule.created"] != 1 ||
		perType["paysched.schedule.paused"] != 1 || len(notes) != want {
		t.Fatalf("notifications by type %v (distinct %d), want created=%d completed=%d failed=%d", perType, len(notes), len(ids), completed, failed)
	}
}
