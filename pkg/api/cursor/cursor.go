// Package cursor makes opaque, tamper-evident page cursors: a position plus
// the scope it was issued for (actor and filter), signed with HMAC-SHA256.
// A cursor that was altered, or is replayed by another actor or with another
// filter, does not verify.
package cursor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
)

// ErrInvalid is returned for any cursor that does not verify.
var ErrInvalid = errors.New("invalid cursor")

// Signer signs and verifies cursors with one secret.
type Signer struct{ key []byte }

// NewSigner returns a Signer keyed by secret.
func NewSigner(secret []byte) *Signer {
	k := sha256.Sum256(append([]byte("paysched-cursor:"), secret...))
	return &Signer{key: k[:]}
}

const macLen = 16

// Encode returns the cursor for position pos within scope.
func (s *Signer) Encode(pos int64, scope string) string {
	buf := binary.BigEndian.AppendUint64(nil, uint64(pos))
	buf = append(buf, s.mac(buf, scope)...)
	return base64.RawURLEncoding.EncodeToString(buf)
}

// Decode returns the position of a cursor issued for scope.
func (s *Signer) Decode(c, scope string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(raw) != 8+macLen {
		return 0, ErrInvalid
	}
	if !hmac.Equal(raw[8:], s.mac(raw[:8], scope)) {
		return 0, ErrInvalid
	}
	return int64(binary.BigEndian.Uint64(raw[:8])), nil
}

func (s *Signer) mac(pos []byte, scope string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(pos)
	m.Write([]byte{0})
	m.Write([]byte(scope))
	return m.Sum(nil)[:macLen]
}
