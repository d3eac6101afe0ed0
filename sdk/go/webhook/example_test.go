package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/paysched/paysched/sdk/go/webhook"
)

func Example() {
	// The endpoint's secret, shown when it was registered.
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a-secret-of-at-least-24-bytes"))
	v, err := webhook.NewVerifier(secret)
	if err != nil {
		panic(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, err := v.Verify(r.Header, body)
		if err != nil {
			http.Error(w, "unverified", http.StatusUnauthorized)
			return
		}
		// Deduplicate on id: a delivery may come again, with the same id.
		fmt.Println("verified", id)
	})

	// A delivery as paysched signs it.
	body := `{"type":"paysched.payment.completed","timestamp":"2026-12-07T09:00:00Z","data":{}}`
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	k, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	m := hmac.New(sha256.New, k)
	m.Write([]byte("msg_1." + ts + "." + body))
	req := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(body))
	req.Header.Set("webhook-id", "msg_1")
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	handler.ServeHTTP(httptest.NewRecorder(), req)
	// Output: verified msg_1
}
