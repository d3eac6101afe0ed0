package gateway

import (
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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

// refusedStream is a Charges stream the gateway refused: Send sees only
// io.EOF, and Recv, called later, returns the refusal.
type refusedStream struct {
	grpc.ClientStream
	sent chan struct{}
}

func (r *refusedStream) Send(*gatewayv1.ChargesRequest) error {
	close(r.sent)
	return io.EOF
}

func (r *refusedStream) Recv() (*gatewayv1.ChargesResponse, error) {
	<-r.sent // the sender has seen EOF first: the order that raced in CI
	return nil, status.Error(codes.PermissionDenied, "client may not call this service")
}

// TestARefusalSeenFirstBySendStaysARefusal: when the gateway refuses the
// stream, Send returns io.EOF and only Recv carries the status. The callers
// must get the refusal (nothing charged, certain), never an ambiguous
// "stream lost" built from the EOF.
func TestARefusalSeenFirstBySendStaysARefusal(t *testing.T) {
	st := &refusedStream{sent: make(chan struct{})}
	s := &chargeStream{g: &GRPC{}, st: st, cancel: func() {}, pending: map[uint64]chan answer{}, wake: make(chan struct{}, 1)}
	ch := make(chan answer, 1)
	s.add(&gatewayv1.ChargeItem{Tag: 1, Request: &gatewayv1.ChargeRequest{IdempotencyKey: "a"}}, ch)
	go s.send()
	go s.recv()
	select {
	case a := <-ch:
		if status.Code(a.err) != codes.PermissionDenied {
			t.Fatalf("answer %v, want PERMISSION_DENIED", a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
	}
}
