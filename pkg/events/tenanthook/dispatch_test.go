package tenanthook

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/test/kafkatest"
)

// A dispatcher that reads a partition again from an earlier offset (here:
// a group with no committed offsets, as after a broker lost them) looks up
// the notifications below the offset a previous owner may have reached,
// and sends none of them twice; what is produced after its first fetch is
// attempted without a look-up, unless it is marked as published again (a
// resync's snapshot). Before, every poll asked the database which
// of its notifications were recorded: a statement on the read path for
// every batch, whoever read it first.
func TestOnlyNotificationsReadAgainAreLookedUp(t *testing.T) {
	db, _ := newDB(t)
	var mu sync.Mutex
	got := map[string]int{}
	endpoint(t, db, "acme", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("webhook-id")]++
		mu.Unlock()
	}), 4)
	topics := kafka.DefaultTopics
	seeds := kafkatest.NewCluster(t, topics.Notifications)
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			rec := noteOf("acme", "paysched.payment.completed", fmt.Sprintf("msg-%02d", i), time.Now()).Record(topics.Notifications)
			if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	delivered := func(n int) {
		t.Helper()
		for {
			var c int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state = $1`, DeliveredState).Scan(&c); err != nil {
				t.Fatal(err)
			}
			if c == n {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%d of %d delivered", c, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	run := func(group string) (*Dispatcher, func()) {
		t.Helper()
		d, err := New(Config{Brokers: seeds, Group: group, Topics: topics, Egress: Egress{Loopback: true, Timeout: 5 * time.Second}},
			db, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(rctx) }()
		return d, func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("dispatcher: %v", err)
			}
			d.Close()
		}
	}

	produce(0, 10)
	first, stopFirst := run("first")
	delivered(10)
	stopFirst()
	if n := testutil.ToFloat64(first.m.recheck); n != 10 {
		// Its first fetch's high watermark is past the ten: a previous
		// owner could have read them, for all it knows.
		t.Fatalf("the first dispatcher looked up %v notifications, want the 10 there when it was assigned", n)
	}

	second, stopSecond := run("second") // no committed offsets: reads all ten again
	defer stopSecond()
	for testutil.ToFloat64(second.m.recheck) < 10 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	produce(10, 15)
	// A resync's snapshot publishes msg-03 again, marked: looked up, not
	// sent again.
	replay := noteOf("acme", "paysched.payment.completed", "msg-03", time.Now())
	replay.Replay = true
	if err := prod.ProduceSync(ctx, replay.Record(topics.Notifications)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	delivered(15)
	for testutil.ToFloat64(second.m.recheck) < 11 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a resend would have arrived by now
	if n := testutil.ToFloat64(second.m.recheck); n != 11 {
		t.Fatalf("looked up %v notifications, want the 10 read again and the replayed one, none of the 5 produced since", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 15 {
		if id := fmt.Sprintf("msg-%02d", i); got[id] != 1 {
			t.Errorf("%s received %d times, want once", id, got[id])
		}
	}
}
