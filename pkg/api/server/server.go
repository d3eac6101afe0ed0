// Package server is the plumbing the two API processes share
// (services/payments-api/paymentsserver and services/admin-api/adminserver
// assemble them): the pool and token verifier, the three listeners, the
// readiness check and the UTF-8 codec.
package server

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/platform/svc"
)

// Connect opens an API's pool and token verifier. Its statements name one
// payment's due time: custom plans keep one partition (svc.CustomPlans).
func Connect(ctx context.Context, url string, conns int, a auth.Config) (*pgxpool.Pool, *auth.Verifier, error) {
	pool, err := svc.Pool(ctx, url, conns, svc.CustomPlans)
	if err != nil {
		return nil, nil, err
	}
	verifier, err := auth.NewVerifier(a)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, verifier, nil
}

// Listeners are an API's: gRPC and REST, which clients reach, and the
// internal one with /metrics and /healthz.
type Listeners struct {
	GRPC, HTTP, Internal net.Listener
}

// Listen opens the three listeners, or none.
func Listen(grpcAddr, httpAddr, internalAddr string) (Listeners, error) {
	var l Listeners
	var opened []net.Listener
	for _, a := range []struct {
		name, addr string
		into       *net.Listener
	}{{"grpc", grpcAddr, &l.GRPC}, {"http", httpAddr, &l.HTTP}, {"metrics", internalAddr, &l.Internal}} {
		lis, err := net.Listen("tcp", a.addr)
		if err != nil {
			for _, o := range opened {
				o.Close()
			}
			return Listeners{}, fmt.Errorf("listen %s %s: %w", a.name, a.addr, err)
		}
		*a.into = lis
		opened = append(opened, lis)
	}
	return l, nil
}

// Close closes the listeners (for a server that never served them).
func (l Listeners) Close() {
	for _, lis := range []net.Listener{l.GRPC, l.HTTP, l.Internal} {
		if lis != nil {
			lis.Close()
		}
	}
}

// Pinger is a readiness check: the database answers.
func Pinger(pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return pool.Ping(ctx)
	}
}
