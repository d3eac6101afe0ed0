package auth

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/paysched/paysched/pkg/api/apierr"
)

// public lists gRPC services callable without a token: health checks and
// reflection carry no payment data.
var public = []string{"/grpc.health.v1.", "/grpc.reflection."}

// UnaryInterceptor authenticates every unary call but health and reflection.
func (v *Verifier) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if isPublic(info.FullMethod) {
			return h(ctx, req)
		}
		if _, ok := FromContext(ctx); ok {
			return h(ctx, req)
		}
		p, err := v.fromMetadata(ctx)
		if err != nil {
			return nil, err
		}
		return h(WithPrincipal(ctx, p), req)
	}
}

// StreamInterceptor authenticates streams (reflection and health excepted).
func (v *Verifier) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if isPublic(info.FullMethod) {
			return h(srv, ss)
		}
		if _, err := v.fromMetadata(ss.Context()); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

func (v *Verifier) fromMetadata(ctx context.Context) (Principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return Principal{}, Unauthenticated("missing bearer token")
	}
	p, err := v.VerifyHeader(vals[0])
	if err != nil {
		return Principal{}, Unauthenticated("invalid or expired token")
	}
	return p, nil
}

// Unauthenticated is the error for a missing or bad token. The cause is not
// echoed: it would help an attacker more than a client.
func Unauthenticated(msg string) error {
	return apierr.New(codes.Unauthenticated, apierr.ReasonUnauthenticated, msg, nil)
}

func isPublic(method string) bool {
	for _, p := range public {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}
