package dial_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paysched/paysched/pkg/gateway/dial"
)

// TestOpenStripe: --gateway=stripe opens the adapter from a key file, and
// the key shows neither in the open gateway's fmt output nor in errors.
func TestOpenStripe(t *testing.T) {
	const key = "sk_test_dial_secret_4242"
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	if err := os.WriteFile(good, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file, url string
		ok              bool
	}{
		{"a key file", good, "http://127.0.0.1:12111", true},
		{"no such file", filepath.Join(dir, "missing"), "http://127.0.0.1:12111", false},
		{"an empty file", empty, "http://127.0.0.1:12111", false},
		{"not a URL", good, "ftp://x", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &dial.Flags{Kind: dial.KindStripe, StripeKeyFile: c.file, StripeURL: c.url}
			g, err := f.Open(context.Background())
			if (err == nil) != c.ok {
				t.Fatalf("err %v, want ok=%v", err, c.ok)
			}
			if err != nil {
				if strings.Contains(err.Error(), key) {
					t.Fatalf("the key is in %q", err)
				}
				return
			}
			defer g.Close()
			if s := fmt.Sprintf("%+v %#v", g, g); strings.Contains(s, key) {
				t.Fatalf("the key is in the gateway's fmt output")
			}
		})
	}
}
