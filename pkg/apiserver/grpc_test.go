package apiserver_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/auth"
	"github.com/paysched/paysched/pkg/rpcerr"
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
	if status.Code(err) != codes.InvalidArgument || rpcerr.Reason(err) != rpcerr.ReasonIdempotencyRequired {
		t.Fatalf("no key: %v", err)
	}
	other := proto.CloneOf(req)
	other.Amount = 701
	_, err = c.CreateScheduledPayment(authed(alice, "idempotency-key", "g1"), other)
	if status.Code(err) != codes.AlreadyExists || rpcerr.Reason(err) != rpcerr.ReasonIdempotencyReused {
		t.Fatalf("reuse: %v", err)
	}
	bad := &payschedv1.CreateScheduledPaymentRequest{Payee: strings.Repeat("p", 129), Amount: -1, Currency: "ABC"}
	_, err = c.CreateScheduledPayment(authed(alice, "idempotency-key", "g2"), bad)
	got := map[string]bool{}
	for _, v := range rpcerr.Violations(err) {
		got[v.Field] = true
	}
	if status.Code(err) != codes.InvalidArgument || !got["payee"] || !got["amount"] || !got["currency"] || !got["dueAt"] {
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
	e := start(t)
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
	want := "grpc.health.v1.Health grpc.reflection.v1.ServerReflection grpc.reflection.v1alpha.ServerReflection paysched.v1.PaymentsService"
	if strings.Join(names, " ") != want {
		t.Fatalf("services %v", names)
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func sign(t *testing.T, secret string, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEveryAuthFailureIs401 covers REST and gRPC alike.
func TestEveryAuthFailureIs401(t *testing.T) {
	e := start(t)
	now := time.Now()
	good := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "alice", "iss": auth.DefaultIssuer, "aud": auth.DefaultAudience,
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	}
	with := func(k string, v any) jwt.MapClaims {
		c := good()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	none := b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(`{"sub":"alice","iss":"paysched-local","aud":"paysched","exp":`+
		fmt.Sprint(now.Add(time.Hour).Unix())+`}`) + "."
	cases := map[string]string{
		"missing":        "",
		"garbage":        "not-a-jwt",
		"alg none":       none,
		"wrong key":      sign(t, "another-secret", good()),
		"expired":        sign(t, testSecret, with("exp", now.Add(-2*time.Minute).Unix())),
		"no exp":         sign(t, testSecret, with("exp", nil)),
		"wrong audience": sign(t, testSecret, with("aud", "someone-else")),
		"wrong issuer":   sign(t, testSecret, with("iss", "evil")),
		"no subject":     sign(t, testSecret, with("sub", nil)),
		"future iat":     sign(t, testSecret, with("iat", now.Add(time.Hour).Unix())),
	}
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			r := e.do("GET", create, tok, nil, "")
			if r.code != http.StatusUnauthorized || r.reason(t) != "UNAUTHENTICATED" || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("REST: %d %s", r.code, r.body)
			}
			ctx := context.Background()
			if tok != "" {
				ctx = authed(tok)
			}
			_, err := c.ListScheduledPayments(ctx, &payschedv1.ListScheduledPaymentsRequest{})
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("gRPC: %v", err)
			}
		})
	}
	if r := e.do("GET", create, sign(t, testSecret, good()), nil, ""); r.code != http.StatusOK {
		t.Fatalf("the good token must pass: %d %s", r.code, r.body)
	}
	if r := e.do("GET", create, "", map[string]string{"Authorization": "Basic YWxpY2U6eA=="}, ""); r.code != http.StatusUnauthorized {
		t.Fatalf("basic auth: %d", r.code)
	}
}
