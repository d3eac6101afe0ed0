// Package stripemock runs stripe-mock (Stripe's stateless API mock, pinned
// in deploy/local/tools.sh) for tests, and records what an HTTP client
// sends to it.
package stripemock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysched/paysched/test/freeport"
)

// RequireEnv names the variable that, set to 1, makes a missing stripe-mock binary a failure
// rather than a skip (deploy/local/test.sh sets it).
const RequireEnv = "PAYSCHED_REQUIRE_STRIPE_MOCK"

// Key is a test-mode key stripe-mock accepts.
const Key = "sk_test_123"

// Server is a running stripe-mock.
type Server struct {
	// URL is its plain-HTTP base URL.
	URL string
	// HTTPSURL is its HTTPS base URL (a self-signed certificate).
	HTTPSURL string
}

// Binary finds stripe-mock: .tools/stripe-mock at the repository root
// (the directory holding go.work, walking up from here), else on PATH.
func Binary() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("stripe-mock: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			p := filepath.Join(dir, ".tools", "stripe-mock")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			break
		}
		dir = up
	}
	p, err := exec.LookPath("stripe-mock")
	if err != nil {
		return "", errors.New("stripe-mock is neither in .tools/ nor on PATH: run deploy/local/tools.sh")
	}
	return p, nil
}

// Start runs stripe-mock on free loopback ports until the test ends. A
// missing binary skips the test, or fails it when RequireEnv is 1.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%v (%s=1)", err, RequireEnv)
		}
		t.Skipf("%v; skipping the stripe-mock contract test", err)
	}
	httpPort, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	httpsPort, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{
		URL:      fmt.Sprintf("http://127.0.0.1:%d", httpPort),
		HTTPSURL: fmt.Sprintf("https://127.0.0.1:%d", httpsPort),
	}
	var out bytes.Buffer
	// The -addr forms of -http-port and -https-port: loopback only.
	cmd := exec.Command(bin, "-http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort), "-https-addr", fmt.Sprintf("127.0.0.1:%d", httpsPort))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stripe-mock: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // it may have exited already
		_ = <-exited           // killed: its exit error says so
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ready(s.URL) {
			return s
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("stripe-mock exited: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not answer within 20 s\n%s", out.String())
		}
	}
}

// ready: stripe-mock answers an authenticated read.
func ready(base string) bool {
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/balance", nil)
	req.Header.Set("Authorization", "Bearer "+Key)
	resp, err := (&http.Client{Timeout: time.Second}).Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Entry is one recorded request.
type Entry struct {
	// Method and Path are the request's.
	Method, Path string
	// Form is the request's parameters (query or form body).
	Form url.Values
	// IdempotencyKey is the header's value.
	IdempotencyKey string
	// Status is the HTTP status, 0 when no answer came.
	Status int
	// Body is the answer.
	Body []byte
	// Err is the transport's error.
	Err error
}

// keyLike is anything shaped like a Stripe API key.
var keyLike = regexp.MustCompile(`\b(sk|rk)_(test|live)_[A-Za-z0-9*]+`)

// String is the entry on one line, keys redacted: method, path, the
// parameters in order, the Idempotency-Key, the status.
func (e Entry) String() string {
	keys := make([]string, 0, len(e.Form))
	for k := range e.Form {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var params []string
	for _, k := range keys {
		for _, v := range e.Form[k] {
			params = append(params, k+"="+v)
		}
	}
	s := e.Method + " " + e.Path
	if len(params) > 0 {
		s += " " + strings.Join(params, " ")
	}
	if e.IdempotencyKey != "" {
		s += " [Idempotency-Key: " + e.IdempotencyKey + "]"
	}
	s += " [Authorization: Bearer [redacted]]"
	if e.Err != nil {
		s += fmt.Sprintf(" -> error %v", e.Err)
	} else {
		s += fmt.Sprintf(" -> %d", e.Status)
	}
	return keyLike.ReplaceAllString(s, "[redacted]")
}

// Recorder is an http.RoundTripper that records each request.
type Recorder struct {
	// Next carries the requests; nil: http.DefaultTransport.
	Next http.RoundTripper

	mu      sync.Mutex
	entries []Entry
}

// RoundTrip implements http.RoundTripper.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	e := Entry{Method: req.Method, Path: req.URL.Path, IdempotencyKey: req.Header.Get("Idempotency-Key")}
	form, err := url.ParseQuery(req.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("recorder: query: %w", err)
	}
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("recorder: body: %w", err)
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		body, err := url.ParseQuery(string(b))
		if err != nil {
			return nil, fmt.Errorf("recorder: form body: %w", err)
		}
		for k, v := range body {
			form[k] = append(form[k], v...)
		}
	}
	e.Form = form
	next := r.Next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		e.Err = err
	} else {
		e.Status = resp.StatusCode
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr != nil {
			return nil, fmt.Errorf("recorder: answer: %w", rerr)
		}
		e.Body = b
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	r.mu.Lock()
	r.entries = append(r.entries, e)
	r.mu.Unlock()
	return resp, err
}

// Entries returns what was recorded, and forgets it.
func (r *Recorder) Entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries
	r.entries = nil
	return e
}
