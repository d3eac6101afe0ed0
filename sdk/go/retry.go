package paysched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// RetryPolicy bounds the retries of a call answered 429 or 503, or lost to
// a network error. A POST is retried only when it is safe to send again:
// it carries an idempotency key (every create of this SDK does) or each of
// its items a requestId (CreatePayments).
type RetryPolicy struct {
	// Attempts is the most attempts of one call, the first included (1:
	// never retry).
	Attempts int
	// Base is the first backoff; each next one doubles, up to Max. Each
	// wait is drawn between half the backoff and the backoff (jitter), and
	// is at least what the answer's Retry-After asks.
	Base, Max time.Duration
	// MaxRetryAfter is the longest Retry-After honoured: an answer asking
	// for longer is returned to the caller, not waited for.
	MaxRetryAfter time.Duration
}

// DefaultRetry is 4 attempts, backing off from 200 ms to 5 s, honouring a
// Retry-After of up to 30 s.
var DefaultRetry = RetryPolicy{Attempts: 4, Base: 200 * time.Millisecond, Max: 5 * time.Second, MaxRetryAfter: 30 * time.Second}

func (p RetryPolicy) validate() error {
	if p.Attempts < 1 || p.Base <= 0 || p.Max < p.Base || p.MaxRetryAfter <= 0 {
		return fmt.Errorf("paysched: retry policy %+v: want at least 1 attempt, 0 < base <= max and a positive max Retry-After", p)
	}
	return nil
}

// retrier is the HTTP doer under the generated client: credentials, the
// User-Agent, and retries.
type retrier struct {
	http   *http.Client
	policy RetryPolicy
	tokens oauth2.TokenSource
	agent  string
	sleep  func(context.Context, time.Duration) error
}

// idempotencyHeader is the header of a create's key; the server answers a
// replay with replayedHeader: true.
const (
	idempotencyHeader = "Idempotency-Key"
	replayedHeader    = "Idempotent-Replayed"
)

type safeKey struct{}

// retrySafe marks a POST that may be sent again (each batch item has its
// requestId).
func retrySafe(ctx context.Context) context.Context { return context.WithValue(ctx, safeKey{}, true) }

func resendable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
	default:
		if req.Header.Get(idempotencyHeader) == "" && req.Context().Value(safeKey{}) == nil {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// Do sends req, again after a 429, a 503 or a network error when it may.
func (r *retrier) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	req.Header.Set("User-Agent", r.agent)
	if r.tokens != nil {
		tok, err := r.tokens.Token()
		if err != nil {
			return nil, fmt.Errorf("paysched: token: %w", err)
		}
		tok.SetAuthHeader(req)
	}
	again := resendable(req)
	backoff := r.policy.Base
	for attempt := 1; ; attempt++ {
		sent := req
		if attempt > 1 {
			// A request of its own each time: the transport may still hold
			// the last one's body.
			sent = req.Clone(ctx)
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return nil, fmt.Errorf("paysched: resend body: %w", err)
				}
				sent.Body = body
			}
		}
		resp, err := r.http.Do(sent)
		if err == nil {
			asStatus(resp)
		}
		retry := false
		wait := rand.N(backoff/2+1) + backoff/2
		switch {
		case err != nil:
			retry = ctx.Err() == nil && !errors.Is(err, context.Canceled)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
			retry = true
			if after, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
				if after > r.policy.MaxRetryAfter {
					retry = false
				} else if after > wait {
					wait = after
				}
			}
		}
		if !retry || !again || attempt >= r.policy.Attempts {
			return resp, err
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return resp, err // no time left to wait for another answer
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			_ = resp.Body.Close()
		}
		if err := r.sleep(ctx, wait); err != nil {
			return nil, err
		}
		backoff = min(2*backoff, r.policy.Max)
	}
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// asStatus makes a refusal whose body is not the API's JSON status (a
// proxy's page, a load balancer's text) one: the status with the text as
// its message, so the caller gets an *Error either way.
func asStatus(resp *http.Response) {
	if resp.StatusCode < 400 || strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
	msg, _ := json.Marshal(strings.TrimSpace(string(b)))
	body := fmt.Sprintf(`{"code":%d,"message":%s,"details":[]}`, grpcCode(resp.StatusCode), msg)
	resp.Body = io.NopCloser(strings.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Type", "application/json")
}

// grpcCode is the gRPC code grpc-gateway answers an HTTP status with.
func grpcCode(status int) int {
	switch status {
	case http.StatusBadRequest:
		return 3
	case http.StatusUnauthorized:
		return 16
	case http.StatusForbidden:
		return 7
	case http.StatusNotFound:
		return 5
	case http.StatusConflict:
		return 10
	case http.StatusTooManyRequests:
		return 8
	case http.StatusServiceUnavailable:
		return 14
	case http.StatusGatewayTimeout:
		return 4
	}
	return 2
}
