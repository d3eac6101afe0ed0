package gateway

import (
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
)

// sentRecorder is a Charges stream that records what is sent and never
// answers.
type sentRecorder struct {
	grpc.ClientStream
	mu   sync.Mutex
	tags []uint64
	sent chan struct{}
}

func (r *sentRecorder) Send(req *gatewayv1.ChargesRequest) error {
	r.mu.Lock()
	for _, it := range req.GetItems() {
		r.tags = append(r.tags, it.GetTag())
	}
	r.mu.Unlock()
	r.sent <- struct{}{}
	return nil
}

func (r *sentRecorder) Recv() (*gatewayv1.ChargesResponse, error) { select {} }

// TestAGivenUpChargeIsNeverSent: a caller whose deadline passed while its
// item waited in the stream's queue has been answered (ambiguous) and
// stopped waiting; its item must not go out afterwards, or a charge could
// land that nobody waits for and the next attempt's probe may miss.
func TestAGivenUpChargeIsNeverSent(t *testing.T) {
	rec := &sentRecorder{sent: make(chan struct{}, 4)}
	s := &chargeStream{g: &GRPC{}, st: rec, cancel: func() {}, pending: map[uint64]chan answer{}, wake: make(chan struct{}, 1)}
	gaveUp, waiting := make(chan answer, 1), make(chan answer, 1)
	s.add(&gatewayv1.ChargeItem{Tag: 1, Request: &gatewayv1.ChargeRequest{IdempotencyKey: "a"}}, gaveUp)
	s.add(&gatewayv1.ChargeItem{Tag: 2, Request: &gatewayv1.ChargeRequest{IdempotencyKey: "b"}}, waiting)
	s.forget(1) // its caller's context ended before the sender ran
	go s.send()
	select {
	case <-rec.sent:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing sent")
	}
	s.fail(errors.New("test over"))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.tags) != 1 || rec.tags[0] != 2 {
		t.Fatalf("sent items %v, want only 2 (1's caller gave up)", rec.tags)
	}
}
