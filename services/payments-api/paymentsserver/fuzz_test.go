package paymentsserver_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// FuzzCreateREST sends arbitrary bodies to POST /v1/scheduled-payments on a
// real payments-api and database: decoding and validation must never panic
// and never answer 5xx, and every answer must be JSON.
func FuzzCreateREST(f *testing.F) {
	due := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	for _, s := range []string{
		`{"payee":"bob","amount":1500,"currency":"USD","dueAt":"` + due + `"}`,
		`{"payee":"bob","amount":1500,"dueAt":"` + due + `","description":"d","metadata":{"a":"b"}}`,
		`{"payee":"","amount":"x","dueAt":"nope","extra":1}`,
		`{"payee":"\u0000","amount":1e400,"dueAt":"9999-12-31T23:59:59Z"}`,
		`{"payee":"b","amount":9223372036854775807,"dueAt":"0001-01-01T00:00:00Z"}`,
		`{"metadata":{"":""},"requestId":"x","currency":null}`,
		`[]`, `null`, `{`, `{"payee":"ü\ud800","amount":1,"dueAt":"` + due + `"}`,
	} {
		f.Add(s)
	}
	e := start(f)
	tok := token(f, "fuzzer")
	client := &http.Client{Timeout: 10 * time.Second}
	f.Fuzz(func(t *testing.T, body string) {
		sum := sha256.Sum256([]byte(body))
		req, _ := http.NewRequest("POST", e.base+create, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", hex.EncodeToString(sum[:16]))
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		checkContract(t, req, res.StatusCode, res.Header, b)
		if res.StatusCode >= 500 {
			t.Fatalf("%d for %q: %s", res.StatusCode, body, b)
		}
		switch res.StatusCode {
		case http.StatusCreated, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("unexpected %d for %q: %s", res.StatusCode, body, b)
		}
		if !json.Valid(b) {
			t.Fatalf("non-JSON answer for %q: %s", body, b)
		}
	})
}
