package paymentsserver_test

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/services/payments-api/paymentsserver"
)

func authed(tok string, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), append([]string{"authorization", "Bearer " + tok}, kv...)...)
}

func TestGRPCCreateKeysAndErrors(t *testing.T) {
	e := start(t)
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	alice := token(t, "alice")
	req := &payschedv1.CreateScheduledPaymentRequest{Payee: "bob", Amount: 700, DueAt: timestamppb.New(time.Now().Add(time.Hour))}

	first, err := c.CreateScheduledPayment(authed(alice, "idempotency-key", "g1"), req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateScheduledPayment(authed(alice, "idempotency-key", "g1"), req)
	if err != nil || !proto.Equal(first, again) {
		t.Fatalf("replay over gRPC: %v %v", err, again)
	}
	withID := proto.CloneOf(req)
	withID.RequestId = "g1"
	viaID, err := c.CreateScheduledPayment(authed(alice), withID)
	if err != nil || viaID.GetPayment().GetPaymentId() != first.GetPayment().GetPaymentId() {
		t.Fatalf("request_id is the same key: %v %v", err, viaID)
	}
	_, err = c.CreateScheduledPayment(authed(alice, "idempotency-key", "other"), withID)
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("disagreeing keys: %v", err)
	}
	_, err = c.CreateScheduledPayment(authed(alice), req)
	if status.Code(err) != codes.InvalidArgument || apierr.Reason(err) != apierr.ReasonIdempotencyRequired {
		t.Fatalf("no key: %v", err)
	}
	other := proto.CloneOf(req)
	other.Amount = 701
	_, err = c.CreateScheduledPayment(authed(alice, "idempotency-key", "g1"), other)
	if status.Code(err) != codes.AlreadyExists || apierr.Reason(err) != apierr.ReasonIdempotencyReused {
		t.Fatalf("reuse: %v", err)
	}
	bad := &payschedv1.CreateScheduledPaymentRequest{Payee: strings.Repeat("p", 129), Amount: -1, Currency: "ABC"}
	_, err = c.CreateScheduledPayment(authed(alice, "idempotency-key", "g2"), bad)
	got := map[string]bool{}
	for _, v := range apierr.Violations(err) {
		got[v.Field] = true
	}
	// Over gRPC, BadRequest names proto fields (due_at); REST keeps the
	// JSON names (TestRESTFieldPathsAreJSONNames).
	if status.Code(err) != codes.InvalidArgument || !got["payee"] || !got["amount"] || !got["currency"] || !got["due_at"] || got["dueAt"] {
		t.Fatalf("invalid: %v %v", err, got)
	}

	id := first.GetPayment().GetPaymentId()
	g, err := c.GetScheduledPayment(authed(alice), &payschedv1.GetScheduledPaymentRequest{PaymentId: id})
	if err != nil || g.GetPayment().GetStatus() != payschedv1.PaymentStatus_PENDING {
		t.Fatalf("get: %v %v", err, g)
	}
	_, err = c.GetScheduledPayment(authed(token(t, "mallory")), &payschedv1.GetScheduledPaymentRequest{PaymentId: id})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("mallory's get: %v", err)
	}
	cx, err := c.CancelScheduledPayment(authed(alice), &payschedv1.CancelScheduledPaymentRequest{PaymentId: id})
	if err != nil || cx.GetPayment().GetStatus() != payschedv1.PaymentStatus_CANCELLED {
		t.Fatalf("cancel: %v %v", err, cx)
	}
	l, err := c.ListScheduledPayments(authed(alice), &payschedv1.ListScheduledPaymentsRequest{Status: payschedv1.PaymentStatus_CANCELLED})
	if err != nil || len(l.GetPayments()) != 1 {
		t.Fatalf("list: %v %v", err, l)
	}
}

func TestReflectionListsServices(t *testing.T) {
	e := start(t, func(c *paymentsserver.Config) { c.Reflection = true })
	stream, err := reflectionpb.NewServerReflectionClient(e.cc).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	sort.Strings(names)
	// AdminService is admin-api's, never payments-api's.
	want := "grpc.health.v1.Health grpc.reflection.v1.ServerReflection grpc.reflection.v1alpha.ServerReflection paysched.v1.PaymentsService paysched.v1.SchedulesService paysched.v1.WebhooksService"
	if strings.Join(names, " ") != want {
		t.Fatalf("services %v", names)
	}
}

// TestPublicPortsShowNoInternals: the ports an ingress reaches serve the
// API only. /metrics and /healthz are on the internal listener, and gRPC
// reflection is off unless configured (development).
func TestPublicPortsShowNoInternals(t *testing.T) {
	for name, e := range map[string]*env{"payments-api": start(t), "admin-api": startAdmin(t)} {
		if r := e.do("GET", "/metrics", "", nil, ""); r.code != http.StatusNotFound {
			t.Errorf("%s: GET /metrics on the API port: %d, want 404", name, r.code)
		}
		for _, p := range []string{"/metrics", "/healthz"} {
			res, err := http.Get(e.internal + p)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("%s: GET %s on the internal port: %d", name, p, res.StatusCode)
			}
			if p == "/metrics" && !strings.Contains(string(b), "go_goroutines") {
				t.Errorf("%s: the internal /metrics has no metrics", name)
			}
		}
		stream, err := reflectionpb.NewServerReflectionClient(e.cc).ServerReflectionInfo(context.Background())
		if err == nil {
			// A Send the server has already refused answers io.EOF; the
			// stream's status is Recv's to tell.
			_ = stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: reflection on the API port: %v, want Unimplemented", name, err)
		}
	}
}
