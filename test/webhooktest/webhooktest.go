// Package webhooktest delivers notifications to their endpoints in a test,
// as the webhook-dispatcher would, without Kafka: a tenanthook.Deliverer runs
// until the notes given are recorded, then stops.
package webhooktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// Deliver attempts notes once each on the fast path (loopback endpoints
// allowed) and returns when each is recorded in db.
func Deliver(t testing.TB, db pgdb.DB, notes ...notification.Note) {
	t.Helper()
	d := &tenanthook.Deliverer{DB: db, Client: tenanthook.Egress{Loopback: true, Timeout: 5 * time.Second}.Client(), Poll: time.Hour}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()
	select {
	case <-d.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("webhooktest: the deliverer never read its endpoints")
	}
	var wg sync.WaitGroup
	for _, n := range notes {
		wg.Add(1)
		d.Submit(n, wg.Done)
	}
	recorded := make(chan struct{})
	go func() { wg.Wait(); close(recorded) }()
	select {
	case <-recorded:
	case <-time.After(30 * time.Second):
		t.Fatal("webhooktest: notifications not recorded within 30 s")
	}
}
