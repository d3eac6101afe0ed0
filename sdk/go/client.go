// Package paysched is the Go SDK of paysched's payments API: schedule a
// payment for a future instant, read, list and cancel it, make recurring
// schedules and manage the tenant's webhook endpoints, over REST.
//
// Around the generated client (package api) it does the parts payment
// integrations get wrong by hand:
//
//   - every create carries an idempotency key, made for the call and reused
//     by each of its retries, and says whether the server replayed an
//     earlier answer;
//   - 429, 503 and network errors are retried with jittered backoff,
//     honouring Retry-After, within a bound;
//   - lists are iterators over every page (iter.Seq2);
//   - failures are *Error values carrying the server's reason
//     (errors.Is(err, paysched.ErrIdempotencyKeyReused)) and field
//     violations;
//   - CreatePayments fills each item's requestId and splits at the
//     server's batch limit;
//   - ClientCredentials is an OAuth2 token source for machine clients;
//   - package webhook verifies the Standard Webhooks deliveries.
package paysched

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/paysched/paysched/sdk/go/api"
)

// Client calls the payments API. It is safe for concurrent use.
type Client struct {
	raw   *api.ClientWithResponses
	retry *retrier
}

// Option configures a Client.
type Option func(*settings)

type settings struct {
	http   *http.Client
	tokens oauth2.TokenSource
	retry  RetryPolicy
	agent  string
	sleep  func(context.Context, time.Duration) error
}

// WithToken authenticates every call with a fixed bearer token (a JWT).
func WithToken(token string) Option {
	return WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token}))
}

// WithTokenSource authenticates every call with the source's current
// token (ClientCredentials makes one that renews itself).
func WithTokenSource(ts oauth2.TokenSource) Option {
	return func(s *settings) { s.tokens = oauth2.ReuseTokenSource(nil, ts) }
}

// WithHTTPClient sends the requests with c (its Transport, timeouts,
// proxies). The default is a client with a 30 s timeout per attempt.
func WithHTTPClient(c *http.Client) Option { return func(s *settings) { s.http = c } }

// WithRetry replaces the retry policy (DefaultRetry otherwise).
func WithRetry(p RetryPolicy) Option { return func(s *settings) { s.retry = p } }

// WithUserAgent adds to the User-Agent the SDK sends.
func WithUserAgent(agent string) Option { return func(s *settings) { s.agent = agent } }

// New returns a client of the payments API at baseURL (the REST listener,
// such as https://payments.example.com).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("paysched: base URL %q: want http(s)://host[:port]", baseURL)
	}
	s := settings{http: &http.Client{Timeout: 30 * time.Second}, retry: DefaultRetry, sleep: sleepCtx}
	for _, o := range opts {
		o(&s)
	}
	if err := s.retry.validate(); err != nil {
		return nil, err
	}
	agent := "paysched-go/" + Version
	if s.agent != "" {
		agent = s.agent + " " + agent
	}
	r := &retrier{http: s.http, policy: s.retry, tokens: s.tokens, agent: agent, sleep: s.sleep}
	raw, err := api.NewClientWithResponses(strings.TrimRight(baseURL, "/"), api.WithHTTPClient(r))
	if err != nil {
		return nil, fmt.Errorf("paysched: %w", err)
	}
	return &Client{raw: raw, retry: r}, nil
}

// Version is the SDK's version, sent in its User-Agent.
const Version = "0.1.0"

// API is the generated client of every operation of the payments API,
// sending through this client's credentials and retries (a POST is
// retried only when it carries an Idempotency-Key header).
func (c *Client) API() *api.ClientWithResponses { return c.raw }

// transport is a call that got no answer (after its retries).
func transport(err error) error { return fmt.Errorf("paysched: %w", err) }

// answered is nil when an answer is one of want, else the API's refusal
// as an *Error.
func answered(hr *http.Response, body []byte, want ...int) error {
	for _, w := range want {
		if hr.StatusCode == w {
			return nil
		}
	}
	return errorFrom(hr.StatusCode, hr.Header, body)
}

// errNoBody is an answer whose body did not decode as the document says.
var errNoBody = errors.New("paysched: the answer had no body the API documents")

// decoded is an answer's body when its status is one of want: the API's
// refusal as an *Error otherwise, errNoBody when the body is missing.
func decoded[T any](hr *http.Response, body []byte, v *T, want ...int) (*T, error) {
	if err := answered(hr, body, want...); err != nil {
		return nil, err
	}
	return value(v)
}

// value is v, or errNoBody when the answer held none.
func value[T any](v *T) (*T, error) {
	if v == nil {
		return nil, errNoBody
	}
	return v, nil
}
