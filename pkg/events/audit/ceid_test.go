package audit

import (
	"testing"

	"github.com/paysched/paysched/pkg/events/envelope"
)

// A change read again after `cdc --resync` keeps its notification's id:
// the id is made of the payment, its move, its attempt and when it moved,
// not of where the change sat in the log. A receiver deduplicating on
// webhook-id then fulfils once (review item 5). A later rest at the same
// attempt (a hold, a release, a hold again) is another event.
func TestResyncKeepsTheEventID(t *testing.T) {
	id := func(doc string) string {
		t.Helper()
		e, err := envelope.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		_, ceID, ok := Notified(e)
		if !ok {
			t.Fatalf("%s: no notification", doc)
		}
		return ceID
	}
	completed := id(`{"after":{"id":"p1","status":"COMPLETED","prev_status":"PROCESSING","attempt":2,"updated_at":"2026-12-06T10:00:00.123456Z"},"source":{"table":"payments","lsn":45},"op":"u"}`)
	again := id(`{"after":{"id":"p1","status":"COMPLETED","prev_status":"PROCESSING","attempt":2,"updated_at":"2026-12-06T10:00:00.123456Z"},"source":{"table":"payments","lsn":9045},"op":"u"}`)
	snapshot := id(`{"after":{"id":"p1","status":"COMPLETED","prev_status":"PROCESSING","attempt":2,"updated_at":"2026-12-06T10:00:00.123456Z"},"source":{"table":"payments","lsn":99999},"op":"r"}`)
	if completed != again || completed != snapshot {
		t.Fatalf("one completion, three ids: %s, %s (read again), %s (resync snapshot)", completed, again, snapshot)
	}
	created := id(`{"after":{"id":"p1","status":"PENDING","attempt":0,"updated_at":"2026-12-06T09:00:00Z"},"source":{"table":"payments","lsn":1},"op":"c"}`)
	createdSnap := id(`{"after":{"id":"p1","status":"PROCESSING","attempt":1,"updated_at":"2026-12-06T09:59:00Z"},"source":{"table":"payments","lsn":500},"op":"r"}`)
	if created != createdSnap {
		t.Fatalf("one creation, two ids: %s, %s (resync snapshot of the payment in flight)", created, createdSnap)
	}
	held := id(`{"after":{"id":"p2","status":"HELD","prev_status":"PENDING","attempt":0,"updated_at":"2026-12-06T09:00:00Z"},"source":{"table":"payments","lsn":2},"op":"u"}`)
	heldAgain := id(`{"after":{"id":"p2","status":"HELD","prev_status":"PENDING","attempt":0,"updated_at":"2026-12-06T09:05:00Z"},"source":{"table":"payments","lsn":3},"op":"u"}`)
	if held == heldAgain {
		t.Fatal("two holds of one payment share an id: a receiver would drop the second")
	}
}
