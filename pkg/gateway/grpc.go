package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/platform/tracing"
)

// Gateway is the port to a payment gateway that the engine, the reconciler
// and the admin API talk to; docs/GATEWAYS.md says what an implementation
// must guarantee. Errors are gRPC status errors, whatever the transport:
// their codes carry the contract's meanings (proto/gateway/v1: NOT_FOUND,
// RESOURCE_EXHAUSTED, FAILED_PRECONDITION, UNAUTHENTICATED and
// PERMISSION_DENIED are answers; anything else may have been charged).
type Gateway interface {
	// Charge charges once per idempotency key.
	Charge(ctx context.Context, req *gatewayv1.ChargeRequest) (*gatewayv1.Charge, error)
	// GetCharge returns the charge recorded under the request's key, or
	// NOT_FOUND: Absent's when a strongly consistent read proved there is
	// none, a plain NOT_FOUND when it could not. It must work after the
	// gateway has forgotten the key for idempotency.
	GetCharge(ctx context.Context, req *gatewayv1.GetChargeRequest) (*gatewayv1.Charge, error)
	// CancelCharge cancels an undecided charge and returns it as it then
	// stands (proto/gateway/v1).
	CancelCharge(ctx context.Context, req *gatewayv1.CancelChargeRequest) (*gatewayv1.Charge, error)
	// ListSettlements pages the charges settled on a UTC day.
	ListSettlements(ctx context.Context, req *gatewayv1.ListSettlementsRequest) (*gatewayv1.ListSettlementsResponse, error)
}

// FromClient is a Gateway of unary gateway.v1 calls.
func FromClient(c gatewayv1.GatewayServiceClient) Gateway { return unary{c} }

type unary struct {
	c gatewayv1.GatewayServiceClient
}

func (u unary) Charge(ctx context.Context, req *gatewayv1.ChargeRequest) (*gatewayv1.Charge, error) {
	return chargeOf(u.c.Charge(ctx, req))
}

func (u unary) GetCharge(ctx context.Context, req *gatewayv1.GetChargeRequest) (*gatewayv1.Charge, error) {
	return chargeOf(u.c.GetCharge(ctx, req))
}

func (u unary) CancelCharge(ctx context.Context, req *gatewayv1.CancelChargeRequest) (*gatewayv1.Charge, error) {
	return chargeOf(u.c.CancelCharge(ctx, req))
}

// chargeOf is the charge a unary call's response carries.
func chargeOf[R interface{ GetCharge() *gatewayv1.Charge }](resp R, err error) (*gatewayv1.Charge, error) {
	if err != nil {
		return nil, err
	}
	return resp.GetCharge(), nil
}

func (u unary) ListSettlements(ctx context.Context, req *gatewayv1.ListSettlementsRequest) (*gatewayv1.ListSettlementsResponse, error) {
	return u.c.ListSettlements(ctx, req)
}

// GRPC is the Gateway of a gateway.v1 server. Charges go over one
// long-lived Charges stream shared by every caller: each call's request
// joins whatever others are waiting to be sent, and its answer comes back
// on its own, so the cost of a gRPC call is paid per batch rather than per
// payment. A gateway that does not implement Charges is called with Charge.
type GRPC struct {
	unary
	// Linger is how long the sender, woken by a charge, waits for others
	// to join its message (0: it sends what is queued at once). With 5–30
	// ms of gateway latency the callers come back one by one, and without
	// it each message carried one to ten charges.
	Linger     time.Duration
	streamless atomic.Bool // the gateway answered Charges UNIMPLEMENTED

	mu  sync.Mutex
	cur *chargeStream // nil: none open
	tag uint64
}

// NewGRPC returns the Gateway of the gateway.v1 server behind cc.
func NewGRPC(cc grpc.ClientConnInterface) *GRPC {
	return &GRPC{unary: unary{gatewayv1.NewGatewayServiceClient(cc)}}
}

// Close ends the Charges stream; calls waiting on it fail (ambiguous).
func (g *GRPC) Close() {
	g.mu.Lock()
	s := g.cur
	g.mu.Unlock()
	if s != nil {
		s.fail(errors.New("gateway client closed"))
	}
}

// errStreamless is how a stream tells its callers that the gateway does
// not implement Charges: nothing of theirs reached it.
var errStreamless = errors.New("gateway does not implement Charges")

// Charge implements Gateway.
func (g *GRPC) Charge(ctx context.Context, req *gatewayv1.ChargeRequest) (*gatewayv1.Charge, error) {
	if g.streamless.Load() {
		return g.unary.Charge(ctx, req)
	}
	span, tc := tracing.StartItem(ctx, "gateway.v1.GatewayService/Charge")
	s, tag, answer, err := g.enqueue(ctx, req, tc)
	if err != nil {
		tracing.EndItem(span, status.Code(err), err.Error())
		return nil, err
	}
	select {
	case a := <-answer:
		if errors.Is(a.err, errStreamless) {
			g.streamless.Store(true)
			tracing.EndItem(span, codes.Unimplemented, a.err.Error())
			return g.unary.Charge(ctx, req)
		}
		st := status.Convert(a.err)
		tracing.EndItem(span, st.Code(), st.Message())
		return a.charge, a.err
	case <-ctx.Done():
		// The request may have been sent: the caller reads this as
		// ambiguous and asks the gateway.
		s.forget(tag)
		err := status.FromContextError(ctx.Err()).Err()
		tracing.EndItem(span, status.Code(err), err.Error())
		return nil, err
	}
}

// enqueue hands req to the open stream (opening one if none is), returning
// the stream, the item's tag and where its answer will arrive.
func (g *GRPC) enqueue(ctx context.Context, req *gatewayv1.ChargeRequest, tc map[string]string) (*chargeStream, uint64, chan answer, error) {
	var timeout uint32
	if d, ok := ctx.Deadline(); ok {
		timeout = uint32(max(1, time.Until(d).Milliseconds()))
	}
	ch := make(chan answer, 1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur == nil {
		s, err := g.open()
		if err != nil {
			return nil, 0, nil, err
		}
		g.cur = s
	}
	g.tag++
	g.cur.add(&gatewayv1.ChargeItem{Tag: g.tag, Request: req, TimeoutMs: timeout, TraceContext: tc}, ch)
	return g.cur, g.tag, ch, nil
}

// open starts a Charges stream and its sender and receiver.
func (g *GRPC) open() (*chargeStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	st, err := g.c.Charges(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &chargeStream{g: g, st: st, cancel: cancel, pending: map[uint64]chan answer{}, wake: make(chan struct{}, 1)}
	go s.send()
	go s.recv()
	return s, nil
}

type answer struct {
	charge *gatewayv1.Charge
	err    error
}

// chargeStream is one open Charges stream: items queued for its sender,
// and the callers waiting for answers.
type chargeStream struct {
	g      *GRPC
	st     grpc.BidiStreamingClient[gatewayv1.ChargesRequest, gatewayv1.ChargesResponse]
	cancel context.CancelFunc
	wake   chan struct{}

	mu       sync.Mutex
	queue    []*gatewayv1.ChargeItem
	pending  map[uint64]chan answer
	dead     bool
	answered bool // the gateway has answered something on it
}

// add queues an item; the caller holds g.mu. A stream that just died
// answers at once.
func (s *chargeStream) add(it *gatewayv1.ChargeItem, ch chan answer) {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		ch <- answer{err: status.Error(codes.Unavailable, "charge stream closed")}
		return
	}
	s.queue = append(s.queue, it)
	s.pending[it.Tag] = ch
	// Under s.mu: fail closes wake under it too.
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.mu.Unlock()
}

// forget drops a caller that stopped waiting; a late answer is discarded.
func (s *chargeStream) forget(tag uint64) {
	s.mu.Lock()
	delete(s.pending, tag)
	s.mu.Unlock()
}

// send sends whatever is queued, one message per wake-up, each wake-up
// lingering (GRPC.Linger) for more to join it.
func (s *chargeStream) send() {
	var linger *time.Timer
	for range s.wake {
		if d := s.g.Linger; d > 0 {
			// The queue is read after the pause: what joins meanwhile goes in
			// the same message. A caller whose deadline passes meanwhile has
			// been answered and its item is dropped below, as before.
			if linger == nil {
				linger = time.NewTimer(d)
			} else {
				linger.Reset(d)
			}
			<-linger.C
		}
		s.mu.Lock()
		if s.dead {
			s.mu.Unlock()
			return
		}
		// A caller that gave up (its deadline passed while the item was
		// queued) has been answered already and reads that as ambiguous:
		// its item is never sent, so a charge it no longer waits for cannot
		// land behind its back.
		items := make([]*gatewayv1.ChargeItem, 0, len(s.queue)) // a fresh slice: the message may be read after Send returns
		for _, it := range s.queue {
			if _, waiting := s.pending[it.Tag]; waiting {
				items = append(items, it)
			}
		}
		s.queue = s.queue[:0]
		s.mu.Unlock()
		if len(items) == 0 {
			continue
		}
		if err := s.st.Send(&gatewayv1.ChargesRequest{Items: items}); err != nil {
			if errors.Is(err, io.EOF) {
				// The gateway ended the stream: its status (a refusal, say)
				// is what Recv returns, so recv fails the stream with it.
				// Failing here with EOF would race recv and turn a refusal,
				// known to charge nothing, into an ambiguous loss.
				return
			}
			s.fail(fmt.Errorf("send charges: %w", err))
			return
		}
	}
}

// recv hands each answer to its caller.
func (s *chargeStream) recv() {
	for {
		resp, err := s.st.Recv()
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		s.answered = true
		for _, r := range resp.GetResults() {
			ch, ok := s.pending[r.GetTag()]
			if !ok {
				continue // its caller gave up
			}
			delete(s.pending, r.GetTag())
			a := answer{charge: r.GetCharge()}
			switch c := codes.Code(r.GetCode()); c {
			case codes.OK:
			case codes.ResourceExhausted:
				// The gateway answered this item so: its own rate limit,
				// nothing charged (a client-side refusal fails the stream
				// instead, and reads as ambiguous).
				a = answer{err: RateLimited("%s", r.GetMessage())}
			default:
				a = answer{err: status.Error(c, r.GetMessage())}
			}
			ch <- a
		}
		s.mu.Unlock()
	}
}

// fail ends the stream: the next call opens another, and every caller
// still waiting is answered UNAVAILABLE, which reads as ambiguous (the
// request may have reached the gateway), or told to call Charge if the
// gateway does not implement Charges.
func (s *chargeStream) fail(err error) {
	s.g.mu.Lock()
	if s.g.cur == s {
		s.g.cur = nil
	}
	s.g.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return
	}
	s.dead = true
	s.cancel()
	close(s.wake)
	a := answer{err: status.Errorf(codes.Unavailable, "charge stream lost: %v", err)}
	switch code := status.Code(err); {
	case code == codes.Unimplemented && !s.answered:
		a = answer{err: errStreamless}
	case (code == codes.Unauthenticated || code == codes.PermissionDenied) && !s.answered:
		// Refused before the gateway read a charge: keep the code, so the
		// charges are known not to have been made.
		a = answer{err: status.Errorf(code, "charge stream refused: %s", status.Convert(err).Message())}
	}
	for tag, ch := range s.pending {
		ch <- a
		delete(s.pending, tag)
	}
}
