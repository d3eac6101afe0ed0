// Package webhook verifies the webhooks paysched delivers to a tenant's
// endpoints (Standard Webhooks): each POST carries webhook-id (the
// receiver's idempotency key, the same across retries), webhook-timestamp
// and webhook-signature, one or more space-separated signatures of
// "{id}.{timestamp}.{body}": v1 (HMAC-SHA256 with a whsec_ secret) or v1a
// (ed25519, verified with a whpk_ public key).
package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is how far a delivery's timestamp may be from the
// receiver's clock, either way: older is a replay, newer a clock skew.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify.
var (
	// ErrMissing: a header is absent or malformed.
	ErrMissing = errors.New("webhook: missing or malformed webhook-id, webhook-timestamp or webhook-signature")
	// ErrStale: the timestamp is outside the tolerance (a replay, or a skewed clock).
	ErrStale = errors.New("webhook: timestamp outside the tolerance")
	// ErrSignature: no signature matches any key.
	ErrSignature = errors.New("webhook: no signature matches")
)

// key is one secret or public key a verifier accepts.
type key struct {
	hmac []byte
	pub  ed25519.PublicKey
}

// Verifier checks deliveries against one or more keys: during a rotation,
// the old and the new secret (a delivery is signed with both).
type Verifier struct {
	keys      []key
	tolerance time.Duration
	now       func() time.Time
}

// NewVerifier accepts whsec_ secrets (v1) and whpk_ public keys (v1a).
func NewVerifier(keys ...string) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, errors.New("webhook: no key")
	}
	v := &Verifier{tolerance: DefaultTolerance, now: time.Now}
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, "whsec_"):
			b, err := base64.StdEncoding.DecodeString(k[len("whsec_"):])
			if err != nil || len(b) == 0 {
				return nil, fmt.Errorf("webhook: a whsec_ secret must be base64 after its prefix")
			}
			v.keys = append(v.keys, key{hmac: b})
		case strings.HasPrefix(k, "whpk_"):
			b, err := base64.StdEncoding.DecodeString(k[len("whpk_"):])
			if err != nil || len(b) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("webhook: a whpk_ key must be base64 of a 32-byte ed25519 public key")
			}
			v.keys = append(v.keys, key{pub: ed25519.PublicKey(b)})
		default:
			return nil, fmt.Errorf("webhook: a key starts with whsec_ or whpk_")
		}
	}
	return v, nil
}

// WithTolerance is v with another tolerance.
func (v *Verifier) WithTolerance(d time.Duration) *Verifier {
	c := *v
	c.tolerance = d
	return &c
}

// WithClock is v reading the time from now (tests).
func (v *Verifier) WithClock(now func() time.Time) *Verifier {
	c := *v
	c.now = now
	return &c
}

// Verify checks a delivery's headers and its body, exactly the bytes
// received, and returns its webhook-id.
func (v *Verifier) Verify(h http.Header, body []byte) (string, error) {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return "", ErrMissing
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", ErrMissing
	}
	if d := v.now().Sub(time.Unix(secs, 0)); d > v.tolerance || d < -v.tolerance {
		return "", ErrStale
	}
	content := make([]byte, 0, len(id)+len(ts)+len(body)+2)
	content = append(append(append(append(append(content, id...), '.'), ts...), '.'), body...)
	for _, s := range strings.Fields(sigs) {
		version, sig64, ok := strings.Cut(s, ",")
		if !ok {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(sig64)
		if err != nil {
			continue
		}
		for _, k := range v.keys {
			switch {
			case version == "v1" && k.hmac != nil:
				m := hmac.New(sha256.New, k.hmac)
				m.Write(content)
				if hmac.Equal(m.Sum(nil), sig) {
					return id, nil
				}
			case version == "v1a" && k.pub != nil:
				if ed25519.Verify(k.pub, content, sig) {
					return id, nil
				}
			}
		}
	}
	return "", ErrSignature
}
