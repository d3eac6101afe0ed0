package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"
)

var now = time.Unix(1_800_000_000, 0)

func sign(secret string, id string, ts int64, body string) string {
	k, _ := base64.StdEncoding.DecodeString(secret[len("whsec_"):])
	m := hmac.New(sha256.New, k)
	m.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func headers(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, sig)
	return h
}

func TestVerify(t *testing.T) {
	oldSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the-old-secret-of-24-bytes!"))
	newSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the-new-secret-of-24-bytes!"))
	pub, priv, _ := ed25519.GenerateKey(nil)
	whpk := "whpk_" + base64.StdEncoding.EncodeToString(pub)
	body := `{"type":"paysched.payment.completed","data":{"paymentId":"p1"}}`
	ts := now.Unix()
	edSig := "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte("msg_1."+strconv.FormatInt(ts, 10)+"."+body)))
	for _, c := range []struct {
		name string
		keys []string
		h    http.Header
		body string
		want error
	}{
		{"v1", []string{newSecret}, headers("msg_1", ts, sign(newSecret, "msg_1", ts, body)), body, nil},
		{"v1a", []string{whpk}, headers("msg_1", ts, edSig), body, nil},
		{"a rotation: signed with both, verified with the new", []string{newSecret},
			headers("msg_1", ts, sign(oldSecret, "msg_1", ts, body)+" "+sign(newSecret, "msg_1", ts, body)), body, nil},
		{"a rotation: the receiver holds both, the sender signs with the old", []string{newSecret, oldSecret},
			headers("msg_1", ts, sign(oldSecret, "msg_1", ts, body)), body, nil},
		{"a wrong secret", []string{oldSecret}, headers("msg_1", ts, sign(newSecret, "msg_1", ts, body)), body, ErrSignature},
		{"a changed body", []string{newSecret}, headers("msg_1", ts, sign(newSecret, "msg_1", ts, body)), body + " ", ErrSignature},
		{"another id", []string{newSecret}, headers("msg_2", ts, sign(newSecret, "msg_1", ts, body)), body, ErrSignature},
		{"stale: 6 minutes old", []string{newSecret}, headers("msg_1", ts-360, sign(newSecret, "msg_1", ts-360, body)), body, ErrStale},
		{"from 6 minutes ahead", []string{newSecret}, headers("msg_1", ts+360, sign(newSecret, "msg_1", ts+360, body)), body, ErrStale},
		{"4 minutes old is in time", []string{newSecret}, headers("msg_1", ts-240, sign(newSecret, "msg_1", ts-240, body)), body, nil},
		{"v1a under a v1 secret", []string{newSecret}, headers("msg_1", ts, edSig), body, ErrSignature},
		{"no signature header", []string{newSecret}, headers("msg_1", ts, ""), body, ErrMissing},
		{"a timestamp that is no number", []string{newSecret}, http.Header{HeaderID: {"m"}, HeaderTimestamp: {"x"}, HeaderSignature: {"v1,AA=="}}, body, ErrMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, err := NewVerifier(c.keys...)
			if err != nil {
				t.Fatal(err)
			}
			id, err := v.WithClock(func() time.Time { return now }).Verify(c.h, []byte(c.body))
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if err == nil && id != c.h.Get(HeaderID) {
				t.Fatalf("id %q", id)
			}
		})
	}
}

func TestNewVerifierRefusesBadKeys(t *testing.T) {
	for _, k := range [][]string{nil, {"secret"}, {"whsec_!!"}, {"whpk_" + base64.StdEncoding.EncodeToString([]byte("short"))}} {
		if _, err := NewVerifier(k...); err == nil {
			t.Errorf("NewVerifier(%q) accepted", k)
		}
	}
}
