package gatewayhook_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/gateway/gatewayhook"
)

func TestVerify(t *testing.T) {
	secret := []byte("s3cret")
	body := []byte(`{"id":"evt_1"}`)
	now := time.Unix(1_800_000_000, 0)
	good := gatewayhook.Sign(secret, now, body)
	for _, tc := range []struct {
		name   string
		header string
		body   []byte
		now    time.Time
		want   error
	}{
		{"valid", good, body, now, nil},
		{"valid within tolerance", good, body, now.Add(4 * time.Minute), nil},
		{"missing", "", body, now, gatewayhook.ErrMissing},
		{"garbage", "nonsense", body, now, gatewayhook.ErrMalformed},
		{"no v1", "t=1800000000", body, now, gatewayhook.ErrMalformed},
		{"bad hex", "t=1800000000,v1=zz", body, now, gatewayhook.ErrMalformed},
		{"tampered body", good, []byte(`{"id":"evt_2"}`), now, gatewayhook.ErrSignature},
		{"other secret", gatewayhook.Sign([]byte("other"), now, body), body, now, gatewayhook.ErrSignature},
		{"timestamp swapped", strings.Replace(good, "t=1800000000", "t=1800000100", 1), body, now.Add(100 * time.Second), gatewayhook.ErrSignature},
		{"replayed later", good, body, now.Add(6 * time.Minute), gatewayhook.ErrStale},
		{"from the future", good, body, now.Add(-6 * time.Minute), gatewayhook.ErrStale},
		{"extra signatures", "t=1800000000,v1=00," + strings.TrimPrefix(good, "t=1800000000,"), body, now, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := gatewayhook.Verify(secret, tc.header, tc.body, tc.now, 5*time.Minute); !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}
