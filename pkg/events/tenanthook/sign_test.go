package tenanthook

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The spec's published example (Svix's documentation): a verifier written
// elsewhere computes the same v1 signature.
func TestSignMatchesThePublishedExample(t *testing.T) {
	got, err := Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
		[]byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
}

func TestSignAndVerify(t *testing.T) {
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	body := []byte(`{"type":"paysched.payment.completed"}`)
	old, cur := NewSymmetricSecret(), NewSymmetricSecret()
	sk, pk := NewKeyPair()
	pk2, err := PublicKey(sk)
	if err != nil || pk2 != pk {
		t.Fatalf("public key of the secret key: %q %v, want %q", pk2, err, pk)
	}
	for _, c := range []struct {
		name    string
		secrets []string
		key     string
		body    []byte
		ts      string
		want    error
	}{
		{"v1", []string{cur}, cur, body, ts, nil},
		{"v1a", []string{sk}, pk, body, ts, nil},
		{"rotation: the new key verifies", []string{cur, old}, cur, body, ts, nil},
		{"rotation: the old key verifies", []string{cur, old}, old, body, ts, nil},
		{"v1 and v1a: the public key verifies", []string{cur, sk}, pk, body, ts, nil},
		{"another key", []string{cur}, old, body, ts, ErrSignature},
		{"a changed body", []string{cur}, cur, []byte(`{"type":"paysched.payment.failed"}`), ts, ErrSignature},
		{"a v1 signature checked with a public key", []string{cur}, pk, body, ts, ErrSignature},
		{"an old timestamp", []string{cur}, cur, body, strconv.FormatInt(now.Add(-6*time.Minute).Unix(), 10), nil},
	} {
		sts := ts
		if c.name == "an old timestamp" {
			sts = c.ts
		}
		n, _ := strconv.ParseInt(sts, 10, 64)
		h, err := Sign(c.secrets, "msg_1", n, body)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(strings.Fields(h)) != len(c.secrets) {
			t.Errorf("%s: %d signatures for %d secrets: %s", c.name, len(strings.Fields(h)), len(c.secrets), h)
		}
		err = Verify(c.key, "msg_1", c.ts, h, c.body, now)
		switch {
		case c.name == "an old timestamp":
			if err == nil || !strings.Contains(err.Error(), "beyond") {
				t.Errorf("%s: %v, want refused", c.name, err)
			}
		case !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestSecretsAreChecked(t *testing.T) {
	for _, s := range []string{"", "whsec_", "whsec_c2hvcnQ=", "whsec_not base64!", "sk_live_x", "whpk_AAAA", "whsk_AAAA"} {
		if err := CheckSecret(s); !errors.Is(err, ErrSecret) {
			t.Errorf("%q: %v, want ErrSecret", s, err)
		}
	}
	if _, err := Sign([]string{"whsec_c2hvcnQ="}, "m", 1, nil); !errors.Is(err, ErrSecret) {
		t.Errorf("sign with a short secret: %v", err)
	}
}
