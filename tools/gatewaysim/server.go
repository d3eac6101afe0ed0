package gatewaysim

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/gatewayhook"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/coalesce"
	"github.com/paysched/paysched/pkg/platform/tracing"
)

// DeclinePrefix means a payee starting with it is always declined.
const DeclinePrefix = "decline-"

// Server implements gateway.v1's GatewayService and GatewayAdminService.
type Server struct {
	gatewayv1.UnimplementedGatewayServiceServer
	gatewayv1.UnimplementedGatewayAdminServiceServer
	ledger Ledger
	faults atomic.Pointer[gatewayv1.Faults]
	// OnCharge, when set, is told of every new charge (webhooks); it must not block.
	OnCharge func(*Charge)
	// Linger is how long the Charges stream's answers wait for others to
	// share their message (0: each message carries what is ready).
	Linger time.Duration
	// PayeeOutage, when its prefix is set, answers UNAVAILABLE without
	// charging to every charge for a payee with that prefix until its end:
	// one merchant's bank down for a while, long enough for the engine to
	// spend its budget and dead-letter those payments (chaos re-drives them).
	PayeeOutage Outage
	// Now dates new charges (nil: time.Now); a test fixes it to a day of
	// its own, so a midnight passing moves nothing.
	Now func() time.Time

	epoch int64        // start time: charge ids stay unique across restarts
	seq   atomic.Int64 // charge id sequence

	mu          sync.Mutex
	second      int64 // the wall-clock second being counted
	inSecond    int64 // charges accepted in it
	maxInSecond int64
	rateLimited atomic.Int64
	// lateRecords counts the charges made after their caller gave up
	// (Faults.late_record_ms).
	lateRecords atomic.Int64
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Outage is a payee outage: charges for payees starting with Prefix fail,
// uncharged, until Until.
type Outage struct {
	Prefix string
	Until  time.Time
}

// New returns a Server over ledger with faults f.
func New(ledger Ledger, f *gatewayv1.Faults) *Server {
	s := &Server{ledger: ledger, epoch: time.Now().UnixNano()}
	if f == nil {
		f = &gatewayv1.Faults{}
	}
	s.faults.Store(f)
	return s
}

func (s *Server) pause(ctx context.Context, f *gatewayv1.Faults) {
	if !delaying(f) {
		return
	}
	t := time.NewTimer(latency(f))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// admit applies the rate ceiling: a fixed window per wall-clock second.
func (s *Server) admit(ceiling float64) bool {
	now := time.Now().Unix()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now != s.second {
		s.second, s.inSecond = now, 0
	}
	if ceiling > 0 && float64(s.inSecond) >= ceiling {
		return false
	}
	s.inSecond++
	if s.inSecond > s.maxInSecond {
		s.maxInSecond = s.inSecond
	}
	return true
}

// chargeID is a new charge id: ch_<epoch in hex>_<sequence>.
func (s *Server) chargeID() string {
	b := make([]byte, 0, 40)
	b = append(b, "ch_"...)
	b = strconv.AppendInt(b, s.epoch, 16)
	b = append(b, '_')
	b = strconv.AppendInt(b, s.seq.Add(1), 10)
	return string(b)
}

func chance(p float64) bool { return p > 0 && rand.Float64() < p }

// Charge implements GatewayService.
func (s *Server) Charge(ctx context.Context, req *gatewayv1.ChargeRequest) (*gatewayv1.ChargeResponse, error) {
	ch, err := s.charge(ctx, req)
	if status.Code(err) == codes.ResourceExhausted {
		// On the wire, a unary rate limit says it is the gateway's
		// (gateway.RateLimited): a client reports an answer over its size
		// limit with the same code.
		return nil, gateway.RateLimited("%s", status.Convert(err).Message())
	}
	if err != nil {
		return nil, err
	}
	return &gatewayv1.ChargeResponse{Charge: ch}, nil
}

// Charges implements GatewayService: each item is charged as Charge
// would, and answered as soon as it is decided. With latency injected, each
// item waits out its own latency on the stream's delay queue (one
// goroutine and one timer for the stream), so a slow one holds only itself.
func (s *Server) Charges(stream gatewayv1.GatewayService_ChargesServer) error {
	ctx := stream.Context()
	out := make(chan *gatewayv1.ChargeResult, 1024)
	sent := make(chan error, 1)
	go func() {
		// One message carries every answer ready by the time it is sent,
		// and those that come within the linger: with latency injected,
		// answers come back one by one.
		var err error
		for r := range out {
			msg := &gatewayv1.ChargesResponse{}
			msg.Results, _ = coalesce.Gather(make([]*gatewayv1.ChargeResult, 0, 16), r, out, 4096, s.Linger)
			if err == nil {
				err = stream.Send(msg)
			}
		}
		sent <- err
	}()
	q := newDelays()
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.run(ctx, func(d delayed) { out <- s.answerDelayed(ctx, d) },
			func(d delayed) { s.recordLate(d.it.GetRequest(), d.arrived) })
	}()
	var recvErr error
	for {
		req, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		f := s.faults.Load()
		now := time.Now()
		for _, it := range req.GetItems() {
			if !delaying(f) {
				out <- s.answer(ctx, it)
				continue
			}
			d := delayed{arrived: now, at: now.Add(latency(f)), it: it}
			if ms := it.GetTimeoutMs(); ms > 0 {
				d.deadline = now.Add(time.Duration(ms) * time.Millisecond)
			}
			q.push(d)
		}
	}
	q.close()
	<-done
	close(out)
	if err := <-sent; err != nil {
		return err
	}
	return recvErr
}

// answer charges one item of a Charges stream at once.
func (s *Server) answer(ctx context.Context, it *gatewayv1.ChargeItem) *gatewayv1.ChargeResult {
	span := tracing.ContinueItem(ctx, "gateway.v1.GatewayService/Charge", it.GetTraceContext())
	ch, err := s.decide(ctx, it.GetRequest(), time.Now())
	return result(span, it, ch, err)
}

// answerDelayed answers an item whose latency has passed, or whose caller
// gave up first: a latency that outlasts the item's timeout ends at the
// timeout, with nothing charged (the caller reads DEADLINE_EXCEEDED as
// ambiguous and asks).
func (s *Server) answerDelayed(ctx context.Context, d delayed) *gatewayv1.ChargeResult {
	span := tracing.ContinueItem(ctx, "gateway.v1.GatewayService/Charge", d.it.GetTraceContext())
	if !d.deadline.IsZero() && d.deadline.Before(d.at) {
		s.recordLate(d.it.GetRequest(), d.arrived)
		return result(span, d.it, nil, status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	}
	ch, err := s.decide(ctx, d.it.GetRequest(), d.arrived)
	return result(span, d.it, ch, err)
}

func result(span trace.Span, it *gatewayv1.ChargeItem, ch *gatewayv1.Charge, err error) *gatewayv1.ChargeResult {
	st := status.Convert(err)
	tracing.EndItem(span, st.Code(), st.Message())
	if err != nil {
		return &gatewayv1.ChargeResult{Tag: it.GetTag(), Code: int32(st.Code()), Message: st.Message()}
	}
	return &gatewayv1.ChargeResult{Tag: it.GetTag(), Charge: ch}
}

// delaying says whether f makes charges wait.
func delaying(f *gatewayv1.Faults) bool { return f.GetLatencyMaxMs() > 0 || f.GetSlowRate() > 0 }

// latency is one charge's injected latency: slow_ms at the slow rate, else
// uniform in the faults' bounds.
func latency(f *gatewayv1.Faults) time.Duration {
	if chance(f.GetSlowRate()) {
		return time.Duration(f.GetSlowMs()) * time.Millisecond
	}
	lo, hi := f.GetLatencyMinMs(), f.GetLatencyMaxMs()
	d := time.Duration(lo) * time.Millisecond
	if hi > lo {
		d += time.Duration(rand.Int64N(int64(hi-lo)+1)) * time.Millisecond
	}
	return d
}

// charge is one unary charge: its latency, then decide.
func (s *Server) charge(ctx context.Context, req *gatewayv1.ChargeRequest) (*gatewayv1.Charge, error) {
	arrived := time.Now()
	s.pause(ctx, s.faults.Load())
	return s.decide(ctx, req, arrived)
}

// recordLate makes, with the late-record fault, the charge req whose
// caller gave up: Faults.late_record_ms after it arrived, whatever the
// caller does meanwhile (its retries under the same key find it, or make
// it first).
func (s *Server) recordLate(req *gatewayv1.ChargeRequest, arrived time.Time) {
	late := time.Duration(s.faults.Load().GetLateRecordMs()) * time.Millisecond
	if late <= 0 {
		return
	}
	time.AfterFunc(max(time.Until(arrived.Add(late)), 0), func() {
		// A background context: nobody waits for this one.
		if _, err := s.decide(context.Background(), req, time.Time{}); err == nil {
			s.lateRecords.Add(1)
		}
	})
}

// decide makes one charge once its latency has passed, for Charge and
// Charges alike. arrived is when its request came in.
func (s *Server) decide(ctx context.Context, req *gatewayv1.ChargeRequest, arrived time.Time) (*gatewayv1.Charge, error) {
	f := s.faults.Load()
	if ctx.Err() != nil {
		// The caller gave up before the gateway got to it: nothing charged
		// now, and later only with the late-record fault.
		s.recordLate(req, arrived)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if req.GetIdempotencyKey() == "" || req.GetAmount() <= 0 || req.GetCurrency() == "" {
		return nil, status.Error(codes.InvalidArgument, "idempotency_key, a positive amount and currency are required")
	}
	if f.GetOutage() || chance(f.GetUnavailableRate()) {
		return nil, status.Error(codes.Unavailable, "gateway unavailable")
	}
	if o := s.PayeeOutage; o.Prefix != "" && strings.HasPrefix(req.GetPayee(), o.Prefix) && time.Now().Before(o.Until) {
		return nil, status.Error(codes.Unavailable, "the payee's bank is unavailable")
	}
	if !s.admit(f.GetRateCeiling()) {
		s.rateLimited.Add(1)
		return nil, status.Error(codes.ResourceExhausted, "rate ceiling reached")
	}
	c := &Charge{
		ID: s.chargeID(), Key: req.GetIdempotencyKey(), Reference: req.GetReference(),
		Amount: req.GetAmount(), Currency: req.GetCurrency(), Payer: req.GetPayer(), Payee: req.GetPayee(),
		CreatedAt: s.now().UTC(),
	}
	switch {
	case strings.HasPrefix(c.Payee, DeclinePrefix):
		c.Declined, c.DeclineReason = true, "payee_blocked"
	case strings.HasPrefix(c.Payee, ActionPrefix) || chance(f.GetActionRequiredRate()):
		// 3-D Secure wanted: undecided until cancelled, as an off-session
		// Stripe PaymentIntent in requires_action.
		c.Pending = PendingAction
	case chance(f.GetProcessingRate()):
		c.Pending, c.DecideAt = PendingProcessing, c.CreatedAt.Add(time.Duration(f.GetProcessingMs())*time.Millisecond)
	case chance(f.GetDeclineRate()):
		c.Declined, c.DeclineReason = true, "insufficient_funds"
	}
	stored, isNew, err := s.ledger.Record(ctx, c)
	if errors.Is(err, ErrMismatch) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if keep := time.Duration(f.GetKeyRetentionMs()) * time.Millisecond; !isNew && keep > 0 && time.Since(stored.CreatedAt) > keep {
		// Like a real PSP, the gateway has forgotten the key: the same
		// request is a new charge (a double charge, unless the engine asked
		// first). The new charge is filed under a key of its own, so
		// GetCharge of the payment's key still finds the first.
		c.Key = req.GetIdempotencyKey() + "~" + c.ID
		if stored, isNew, err = s.ledger.Record(ctx, c); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if isNew && s.OnCharge != nil && stored.Pending == "" {
		// Undecided charges send no webhook: the engine's probes find how
		// they end.
		s.OnCharge(stored)
	}
	if chance(f.GetTimeoutAfterCommitRate()) {
		return nil, status.Error(codes.DeadlineExceeded, poison(f, "gateway timed out (the charge was recorded)"))
	}
	if chance(f.GetUnavailableAfterCommitRate()) {
		// The ambiguous transport fault: what a client sees when the
		// connection drops after the request was sent.
		return nil, status.Error(codes.Unavailable, poison(f, "connection reset (the charge was recorded)"))
	}
	ch := toProto(stored, time.Now())
	ch.IdempotencyKey = req.GetIdempotencyKey() // also for a charge filed under a forgotten key
	ch.DeclineReason = poison(f, ch.GetDeclineReason())
	return ch, nil
}

// ActionPrefix means a payee starting with it always wants the customer's
// authentication (the charge stays undecided until cancelled).
const ActionPrefix = "3ds-"

// poison, at the faults' poison rate, spoils s as a careless gateway
// might: a NUL byte (which no Postgres text value holds) and terminal
// escapes. Invalid UTF-8 cannot cross gateway.v1 (a proto3 string must be
// valid UTF-8: the sender fails to encode it), so the Stripe adapter's
// tests and Clean's own cover that.
func poison(f *gatewayv1.Faults, s string) string {
	if s == "" || !chance(f.GetPoisonRate()) {
		return s
	}
	return s + "\x00\x1b[31m poisoned"
}

// GetCharge implements GatewayService as a PSP with an eventually
// consistent lookup does (Stripe's Search): with --probe-lag a new charge
// is invisible to the lookup by key for that long. A miss is then
// answered as a careful adapter would: by a strongly consistent listing of
// the payer's charges since not_before, which finds a lagging charge (if
// the request names its payer and a window that holds it) and otherwise
// proves the absence (gateway.Absent). Without a payer, or when the
// listing fails (--probe-unproven-rate), the miss is a plain NOT_FOUND,
// which proves nothing.
func (s *Server) GetCharge(ctx context.Context, req *gatewayv1.GetChargeRequest) (*gatewayv1.GetChargeResponse, error) {
	tellClock(ctx)
	// Latency is injected on Charge only, so a probe can answer while charges time out.
	f := s.faults.Load()
	if f.GetOutage() || chance(f.GetProbeUnavailableRate()) {
		return nil, status.Error(codes.Unavailable, poison(f, "gateway unavailable"))
	}
	now := time.Now()
	c, err := s.ledger.Get(ctx, req.GetIdempotencyKey())
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	lag := time.Duration(f.GetProbeLagMs()) * time.Millisecond
	if err == nil && now.Sub(c.CreatedAt) >= lag {
		return &gatewayv1.GetChargeResponse{Charge: toProto(c, now)}, nil
	}
	// The lookup by key missed: list the payer's charges.
	if chance(f.GetProbeUnprovenRate()) || lag > 0 && req.GetPayer() == "" {
		return nil, status.Error(codes.NotFound, "no charge under this key in the index (it may lag)")
	}
	// The window starts at not_before less the contract's skew margin: the
	// engine's clock (the due time) may be ahead of ours (created_at).
	if err == nil && c.Payer == req.GetPayer() && (req.GetNotBefore() == nil || !c.CreatedAt.Before(req.GetNotBefore().AsTime().Add(-gateway.ClockSkew))) {
		return &gatewayv1.GetChargeResponse{Charge: toProto(c, now)}, nil
	}
	return nil, gateway.Absent("no charge under this key")
}

// CancelCharge implements GatewayService: an undecided charge is declined
// ("canceled: <reason>"); a declined one is answered again; a succeeded
// one is answered as it is.
func (s *Server) CancelCharge(ctx context.Context, req *gatewayv1.CancelChargeRequest) (*gatewayv1.CancelChargeResponse, error) {
	f := s.faults.Load()
	if f.GetOutage() {
		return nil, status.Error(codes.Unavailable, "gateway unavailable")
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "abandoned"
	}
	c, err := s.ledger.Cancel(ctx, req.GetIdempotencyKey(), req.GetChargeId(), "canceled: "+reason)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, gateway.Absent("no charge under this key")
	case errors.Is(err, ErrDecided):
		if c, err = s.ledger.Get(ctx, req.GetIdempotencyKey()); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if c.ID != req.GetChargeId() {
			return nil, status.Errorf(codes.FailedPrecondition, "charge %s is not the one under this key", req.GetChargeId())
		}
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &gatewayv1.CancelChargeResponse{Charge: toProto(c, time.Now())}, nil
}

// ListSettlements implements GatewayService.
func (s *Server) ListSettlements(ctx context.Context, req *gatewayv1.ListSettlementsRequest) (*gatewayv1.ListSettlementsResponse, error) {
	day, err := time.Parse(time.DateOnly, req.GetDay())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "day must be YYYY-MM-DD")
	}
	size := int(req.GetPageSize())
	if size <= 0 {
		size = 1000
	}
	size = min(size, 10000)
	cs, next, err := s.ledger.Settled(ctx, day, req.GetPageToken(), size)
	if errors.Is(err, ErrBadPage) {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &gatewayv1.ListSettlementsResponse{NextPageToken: next}
	now := time.Now()
	for _, c := range cs {
		out.Charges = append(out.Charges, toProto(c, now))
	}
	return out, nil
}

// SetFaults implements GatewayAdminService.
func (s *Server) SetFaults(_ context.Context, req *gatewayv1.SetFaultsRequest) (*gatewayv1.SetFaultsResponse, error) {
	f := proto.CloneOf(req.GetFaults())
	if f == nil {
		f = &gatewayv1.Faults{}
	}
	s.faults.Store(f)
	return &gatewayv1.SetFaultsResponse{Faults: f}, nil
}

// GetFaults implements GatewayAdminService.
func (s *Server) GetFaults(context.Context, *gatewayv1.GetFaultsRequest) (*gatewayv1.GetFaultsResponse, error) {
	return &gatewayv1.GetFaultsResponse{Faults: s.faults.Load()}, nil
}

// Report implements GatewayAdminService.
func (s *Server) Report(ctx context.Context, _ *gatewayv1.ReportRequest) (*gatewayv1.ReportResponse, error) {
	total, ok, doubles, err := s.ledger.Counts(ctx)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.mu.Lock()
	maxPS := s.maxInSecond
	s.mu.Unlock()
	return &gatewayv1.ReportResponse{Charges: total, Succeeded: ok, DoubleCharged: doubles,
		RateLimited: s.rateLimited.Load(), MaxChargesPerSecond: maxPS, LateRecords: s.lateRecords.Load()}, nil
}

// toProto is c as it stands at now.
func toProto(c *Charge, now time.Time) *gatewayv1.Charge {
	st := gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED
	var why gatewayv1.PendingReason
	switch {
	case c.Declined:
		st = gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED
	case c.Pending == PendingAction:
		st, why = gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING, gatewayv1.PendingReason_PENDING_REASON_ACTION_REQUIRED
	case !c.Succeeded(now):
		st, why = gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING, gatewayv1.PendingReason_PENDING_REASON_PROCESSING
	}
	return &gatewayv1.Charge{
		ChargeId: c.ID, IdempotencyKey: c.Key, Reference: c.Reference, Amount: c.Amount, Currency: c.Currency,
		Payer: c.Payer, Payee: c.Payee, Status: st, DeclineReason: c.DeclineReason, CreatedAt: timestamppb.New(c.CreatedAt),
		PendingReason: why,
	}
}

// Event is the webhook event reporting c's outcome; its id is derived from
// the charge, so every delivery of one outcome carries the same id.
func Event(c *Charge) gatewayhook.Event {
	typ, st := gatewayhook.TypeSucceeded, payment.Succeeded
	if c.Declined {
		typ, st = gatewayhook.TypeDeclined, payment.Declined
	}
	return gatewayhook.Event{ID: "evt_" + c.ID, Type: typ, Created: c.CreatedAt.Unix(), Data: gatewayhook.Charge{
		ChargeID: c.ID, IdempotencyKey: c.Key, Reference: c.Reference, Payer: c.Payer, Amount: c.Amount, Currency: c.Currency,
		Status: string(st), DeclineReason: c.DeclineReason, CreatedAt: c.CreatedAt,
	}}
}
