package gateway_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
)

// bigAnswers charges every request it is sent, then answers with the
// charge padded past the client's receive limit (a verbose PSP, or a
// message grown by a field the client does not know), or with its own
// rate limit when limited.
type bigAnswers struct {
	gatewayv1.UnimplementedGatewayServiceServer
	stream  bool
	limited bool
	charged atomic.Int32
}

func (b *bigAnswers) answer(r *gatewayv1.ChargeRequest) (*gatewayv1.Charge, error) {
	if b.limited {
		return nil, gateway.RateLimited("slow down")
	}
	b.charged.Add(1)
	c := chargeOf(r)
	c.Currency, c.Amount = pay.Currency, pay.Amount
	c.DeclineReason = strings.Repeat("x", 64<<10)
	return c, nil
}

func (b *bigAnswers) Charge(_ context.Context, r *gatewayv1.ChargeRequest) (*gatewayv1.ChargeResponse, error) {
	c, err := b.answer(r)
	if err != nil {
		return nil, err
	}
	return &gatewayv1.ChargeResponse{Charge: c}, nil
}

func (b *bigAnswers) Charges(st gatewayv1.GatewayService_ChargesServer) error {
	if !b.stream {
		return status.Error(codes.Unimplemented, "no Charges here")
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		out := &gatewayv1.ChargesResponse{}
		for _, it := range req.GetItems() {
			c, err := b.answer(it.GetRequest())
			r := &gatewayv1.ChargeResult{Tag: it.GetTag(), Charge: c}
			if err != nil {
				s := status.Convert(err)
				r = &gatewayv1.ChargeResult{Tag: it.GetTag(), Code: int32(s.Code()), Message: s.Message()}
			}
			out.Results = append(out.Results, r)
		}
		if err := st.Send(out); err != nil {
			return err
		}
	}
}

func (b *bigAnswers) GetCharge(context.Context, *gatewayv1.GetChargeRequest) (*gatewayv1.GetChargeResponse, error) {
	return nil, status.Error(codes.Unavailable, "probe: down")
}

// smallClient dials srv with a 16 KiB receive limit.
func smallClient(t *testing.T, srv gatewayv1.GatewayServiceServer) grpc.ClientConnInterface {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	gatewayv1.RegisterGatewayServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<10)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestOnlyTheGatewaysRateLimitMeansNotCharged: RESOURCE_EXHAUSTED means
// "not charged" only when the gateway sent it (its rate limit, marked as
// such, or a Charges item it answered so). The gRPC client reports an
// answer over its receive limit with the same code, after the request was
// sent and charged: that is uncertain, asked about at once, and never
// read as not charged. Every transport: the Charges stream, unary Charge
// (a gateway without Charges), and a plain gateway.v1 client.
func TestOnlyTheGatewaysRateLimitMeansNotCharged(t *testing.T) {
	for _, c := range []struct {
		name    string
		stream  bool
		unary   bool // gateway.FromClient rather than gateway.NewGRPC
		limited bool
		// want: not charged (RETRYABLE, certain) or uncertain
		notCharged bool
	}{
		{name: "Charges: answer over the client's limit", stream: true},
		{name: "unary Charge: answer over the client's limit"},
		{name: "plain client: answer over the client's limit", unary: true},
		{name: "Charges: the gateway's rate limit", stream: true, limited: true, notCharged: true},
		{name: "unary Charge: the gateway's rate limit", limited: true, notCharged: true},
		{name: "plain client: the gateway's rate limit", unary: true, limited: true, notCharged: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &bigAnswers{stream: c.stream, limited: c.limited}
			cc := smallClient(t, srv)
			var g gateway.Gateway = gateway.NewGRPC(cc)
			if c.unary {
				g = gateway.FromClient(gatewayv1.NewGatewayServiceClient(cc))
			}
			ch := &gateway.Charger{Gateway: g, ChargeTimeout: 5 * time.Second, ProbeTimeout: 5 * time.Second}
			r := ch.Charge(context.Background(), pay)
			if c.notCharged {
				if r.Outcome != payment.Retryable || r.Uncertain || srv.charged.Load() != 0 {
					t.Fatalf("got %+v (charged %d), want RETRYABLE, certain, nothing charged", r, srv.charged.Load())
				}
				return
			}
			if srv.charged.Load() != 1 {
				t.Fatalf("the gateway charged %d times, want 1", srv.charged.Load())
			}
			if !r.Uncertain || r.Outcome != payment.Ambiguous {
				t.Fatalf("got %+v after the gateway charged and its answer was refused by the client: want AMBIGUOUS, uncertain", r)
			}
		})
	}
}
