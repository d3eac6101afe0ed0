// Package gatewayhook signs, sends and verifies the gateway's charge-outcome
// webhooks: the inbound ones, from the gateway to the reconciler
// (pkg/events/tenanthook sends ours out to tenants). A delivery carries a Stripe-like signature header,
//
//	Paysched-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
// so a receiver can prove the sender knew the secret and that the delivery
// is recent: the timestamp is signed too, so a captured delivery cannot be
// replayed later with a fresh one.
package gatewayhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Header is the signature header's name.
const Header = "Paysched-Signature"

// Event types.
const (
	TypeSucceeded = "charge.succeeded"
	TypeDeclined  = "charge.declined"
)

// Event is one delivery's body.
type Event struct {
	// ID identifies the event: a redelivery carries the same one.
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	// Livemode: the charge moved real money (Stripe's livemode). A
	// receiver applies only events of its own mode.
	Livemode bool `json:"livemode"`
	// Account names the account the charge was made in when it is not the
	// receiver's own (a Stripe connected account's event); empty: ours.
	Account string `json:"account,omitempty"`
	Data    Charge `json:"data"`
}

// Charge is the charge an event reports.
type Charge struct {
	ChargeID       string `json:"chargeId"`
	IdempotencyKey string `json:"idempotencyKey"`
	Reference      string `json:"reference"`
	// Payer is whom the charge was made on: the payment's payer (Stripe:
	// the PaymentIntent's customer). A receiver applies an event only to a
	// payment of that payer.
	Payer         string    `json:"payer,omitempty"`
	Amount        int64     `json:"amount"`
	Currency      string    `json:"currency"`
	Status        string    `json:"status"`
	DeclineReason string    `json:"declineReason,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
}

// Sign returns the signature header value for body at time t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verification failures. ErrMissing and ErrMalformed are the sender's
// mistake (400); ErrSignature means the sender does not hold the secret
// (401); ErrStale is a replay or a badly skewed clock (400).
var (
	ErrMissing   = errors.New("signature header missing")
	ErrMalformed = errors.New("signature header malformed")
	ErrSignature = errors.New("signature does not match")
	ErrStale     = errors.New("signature timestamp outside the tolerance")
)

// Verify checks header against body: a v1 signature made with secret, and
// a timestamp within tolerance of now (either side).
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if header == "" {
		return ErrMissing
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrMalformed
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil {
				return ErrMalformed
			}
			sigs = append(sigs, b)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrMalformed
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		// Constant time: the comparison must not leak how much matched.
		if hmac.Equal(s, want) {
			ok = true
		}
	}
	if !ok {
		return ErrSignature
	}
	// Checked after the signature, so an attacker learns nothing about the
	// clock from an unsigned request.
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}

// Sender delivers events to one URL from a bounded queue, retrying each
// with exponential backoff. Webhooks are a fast path only: a delivery that
// exhausts its retries, or finds the queue full, is dropped and counted,
// and the daily reconciliation still catches what it would have told.
type Sender struct {
	URL      string
	Secret   []byte
	Attempts int           // per event (default 8)
	Backoff  time.Duration // first retry delay, doubling (default 500ms)
	Client   *http.Client
	Log      *slog.Logger

	queue     chan Event
	once      sync.Once
	Delivered atomic.Int64
	Dropped   atomic.Int64
}

// Start runs workers until ctx ends.
func (s *Sender) Start(ctx context.Context, workers int) {
	s.init()
	for range max(1, workers) {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case e := <-s.queue:
					s.deliver(ctx, e)
				}
			}
		}()
	}
}

func (s *Sender) init() {
	s.once.Do(func() {
		s.queue = make(chan Event, 100000)
		if s.Attempts <= 0 {
			s.Attempts = 8
		}
		if s.Backoff <= 0 {
			s.Backoff = 500 * time.Millisecond
		}
		if s.Client == nil {
			s.Client = &http.Client{Timeout: 5 * time.Second}
		}
		if s.Log == nil {
			s.Log = slog.Default()
		}
	})
}

// Enqueue queues e without blocking; a full queue drops it.
func (s *Sender) Enqueue(e Event) {
	s.init()
	select {
	case s.queue <- e:
	default:
		s.Dropped.Add(1)
	}
}

func (s *Sender) deliver(ctx context.Context, e Event) {
	body, err := json.Marshal(e)
	if err != nil {
		s.Dropped.Add(1)
		return
	}
	delay := s.Backoff
	for try := 1; ; try++ {
		err := s.post(ctx, body)
		if err == nil {
			s.Delivered.Add(1)
			return
		}
		if try >= s.Attempts {
			s.Dropped.Add(1)
			s.Log.Warn("webhook dropped after retries", "event", e.ID, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (s *Sender) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	// Signed at send time: each retry carries a fresh timestamp.
	req.Header.Set(Header, Sign(s.Secret, time.Now(), body))
	resp, err := s.Client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}
