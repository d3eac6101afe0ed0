package layout_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheGoSDKStandsAlone: the Go SDK's module (sdk/go) requires neither
// the server's module nor the server's heavy dependencies (Kubernetes,
// chromedp, Stripe, Postgres, Kafka): a client pulls in the SDK, its
// generated layer's runtime and OAuth2, nothing else.
func TestTheGoSDKStandsAlone(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "sdk", "go", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) < 2 || strings.HasPrefix(f[0], "module") || f[0] == "go" {
			continue
		}
		dep := f[0]
		for _, never := range []string{"github.com/paysched/paysched", "k8s.io/", "sigs.k8s.io/", "github.com/chromedp/",
			"github.com/stripe/", "github.com/jackc/", "github.com/twmb/", "google.golang.org/grpc"} {
			if strings.HasPrefix(dep, never) && dep != "github.com/paysched/paysched/sdk/go" {
				t.Errorf("sdk/go requires %s", dep)
			}
		}
	}
}
