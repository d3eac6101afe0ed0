// Package tenanthook delivers the payment notifications out to each tenant's
// endpoints (the gateway's inbound webhooks are pkg/gateway/gatewayhook's) as Standard Webhooks (v1): signed POSTs, scheduled in
// Postgres, retried, isolated per endpoint and refused on private
// addresses. docs/EVENTS.md, "Webhooks", is the user's view.
package tenanthook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The secrets' prefixes (Standard Webhooks): a symmetric secret signs v1
// (HMAC-SHA256); an ed25519 secret key signs v1a, and its public key
// verifies.
const (
	SymmetricPrefix = "whsec_"
	SecretKeyPrefix = "whsk_"
	PublicKeyPrefix = "whpk_"
)

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Tolerance is how far a verifier lets a timestamp stray from its clock
// (the spec's replay window).
const Tolerance = 5 * time.Minute

// ErrSecret means a secret is not one of the spec's forms.
var ErrSecret = errors.New("not a webhook secret: want whsec_<base64 of 24 to 64 random bytes> or whsk_<base64 ed25519 key>")

// ErrSignature means no signature of a message matches.
var ErrSignature = errors.New("no matching webhook signature")

// signer signs a message with one secret.
type signer struct {
	version string // v1 or v1a
	hmacKey []byte
	edKey   ed25519.PrivateKey
}

// parseSecret reads a whsec_ or whsk_ secret.
func parseSecret(s string) (signer, error) {
	switch {
	case strings.HasPrefix(s, SymmetricPrefix):
		k, err := base64.StdEncoding.DecodeString(s[len(SymmetricPrefix):])
		if err != nil || len(k) < 24 || len(k) > 64 {
			return signer{}, ErrSecret
		}
		return signer{version: "v1", hmacKey: k}, nil
	case strings.HasPrefix(s, SecretKeyPrefix):
		k, err := base64.StdEncoding.DecodeString(s[len(SecretKeyPrefix):])
		if err != nil {
			return signer{}, ErrSecret
		}
		switch len(k) {
		case ed25519.SeedSize:
			return signer{version: "v1a", edKey: ed25519.NewKeyFromSeed(k)}, nil
		case ed25519.PrivateKeySize:
			return signer{version: "v1a", edKey: ed25519.PrivateKey(k)}, nil
		}
	}
	return signer{}, ErrSecret
}

// CheckSecret says whether s is a secret this package signs with.
func CheckSecret(s string) error {
	_, err := parseSecret(s)
	return err
}

// NewSymmetricSecret is a fresh whsec_ secret of 32 random bytes.
func NewSymmetricSecret() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return SymmetricPrefix + base64.StdEncoding.EncodeToString(k)
}

// NewKeyPair is a fresh ed25519 pair: the whsk_ secret that signs (v1a)
// and the whpk_ public key a receiver verifies with.
func NewKeyPair() (secret, public string) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	return SecretKeyPrefix + base64.StdEncoding.EncodeToString(priv.Seed()),
		PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub)
}

// PublicKey is the whpk_ key of a whsk_ secret.
func PublicKey(secret string) (string, error) {
	s, err := parseSecret(secret)
	if err != nil || s.edKey == nil {
		return "", ErrSecret
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(s.edKey.Public().(ed25519.PublicKey)), nil
}

// signedContent is what is signed: {id}.{timestamp}.{body}.
func signedContent(id string, ts int64, body []byte) []byte {
	b := make([]byte, 0, len(id)+len(body)+24)
	b = append(b, id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, '.')
	return append(b, body...)
}

// Sign is the webhook-signature header of a message: one signature per
// secret, space separated. During a rotation an endpoint has two secrets
// and a receiver that knows either verifies.
func Sign(secrets []string, id string, ts int64, body []byte) (string, error) {
	if len(secrets) == 0 {
		return "", fmt.Errorf("sign %s: no secret", id)
	}
	msg := signedContent(id, ts, body)
	parts := make([]string, 0, len(secrets))
	for _, sec := range secrets {
		s, err := parseSecret(sec)
		if err != nil {
			return "", fmt.Errorf("sign %s: %w", id, err)
		}
		var sig []byte
		if s.edKey != nil {
			sig = ed25519.Sign(s.edKey, msg)
		} else {
			m := hmac.New(sha256.New, s.hmacKey)
			m.Write(msg)
			sig = m.Sum(nil)
		}
		parts = append(parts, s.version+","+base64.StdEncoding.EncodeToString(sig))
	}
	return strings.Join(parts, " "), nil
}

// Verify checks a received message as a receiver would: the timestamp
// within Tolerance of now, and one of the header's signatures made by key
// (a whsec_ secret or a whpk_ public key). The demo's receiver and the
// tests use it; the npm libraries standardwebhooks and svix check the
// same messages in test/webhookverify.
func Verify(key, id, tsHeader, sigHeader string, body []byte, now time.Time) error {
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q: not seconds since the epoch", tsHeader)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("webhook-timestamp %d: %s from now, beyond %s", ts, d.Round(time.Second), Tolerance)
	}
	msg := signedContent(id, ts, body)
	var want []byte
	var pub ed25519.PublicKey
	switch {
	case strings.HasPrefix(key, SymmetricPrefix):
		s, err := parseSecret(key)
		if err != nil {
			return err
		}
		m := hmac.New(sha256.New, s.hmacKey)
		m.Write(msg)
		want = m.Sum(nil)
	case strings.HasPrefix(key, PublicKeyPrefix):
		k, err := base64.StdEncoding.DecodeString(key[len(PublicKeyPrefix):])
		if err != nil || len(k) != ed25519.PublicKeySize {
			return ErrSecret
		}
		pub = k
	default:
		return ErrSecret
	}
	for _, part := range strings.Fields(sigHeader) {
		ver, sig64, ok := strings.Cut(part, ",")
		if !ok {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(sig64)
		if err != nil {
			continue
		}
		switch {
		case ver == "v1" && want != nil && subtle.ConstantTimeCompare(sig, want) == 1:
			return nil
		case ver == "v1a" && pub != nil && ed25519.Verify(pub, msg, sig):
			return nil
		}
	}
	return ErrSignature
}
