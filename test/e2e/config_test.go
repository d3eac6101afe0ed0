package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/platform/config"
)

// TestBadConfigIsRefused: every service checks its configuration before it
// connects anywhere, and says which flag is wrong, instead of hanging or
// running crippled.
func TestBadConfigIsRefused(t *testing.T) {
	bin := build(t, "./services/...")
	for _, c := range []struct {
		service string
		args    []string
		want    string
	}{
		{"executor", []string{"--concurrency", "0"}, "--concurrency must be at least 1"},
		{"executor", []string{"--backoff", "soon"}, "--backoff"},
		{"executor", []string{"--max-releases", "0"}, "--max-releases must be at least 1"},
		{"executor", []string{"--action-required-timeout", "-1m"}, "--action-required-timeout and --processing-timeout must not be negative"},
		{"reconciler", []string{"--processing-timeout", "-1h"}, "--action-required-timeout and --processing-timeout must not be negative"},
		{"sweeper", []string{"--batch", "0"}, "--batch must be at least 1"},
		{"sweeper", []string{"--executors", ""}, "--executors"},
		{"reaper", []string{"--interval", "0s"}, "--interval must be positive"},
		{"cdc", []string{"--kafka-compression", "brotli"}, "--kafka-compression"},
		{"audit-consumer", []string{"--write-streams", "0"}, "--write-streams must be at least 1"},
		{"reconciler", []string{"--run-at", "25:00"}, "--run-at"},
		{"payments-api", []string{"--default-currency", "XXQ"}, "--default-currency"},
		{"payments-api", []string{"--amount-cap", "0"}, "--amount-cap must be positive"},
	} {
		t.Run(c.service+strings.Join(c.args, "="), func(t *testing.T) {
			// Unreachable database: a service that got past validation
			// would hang or fail on connecting, not on the flag.
			refused(t, bin, c.service, append([]string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}, c.args...), c.want)
		})
	}
}

// refused runs service with args and expects it to exit 1 within 20 s,
// saying want; it returns what the service printed.
func refused(t *testing.T, bin, service string, args []string, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin+"/"+service, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v still running after 20s:\n%s", service, args, out)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("%s %v: %v, want exit status 1:\n%s", service, args, err, out)
	}
	if !strings.Contains(string(out), want) {
		t.Fatalf("%s %v said:\n%s\nwant it to mention %q", service, args, out, want)
	}
	return string(out)
}

// TestProductionRefusesDevelopmentSettings: without --dev every service
// refuses to start with a missing, published or short secret, a plaintext
// internal hop or a database connection that does not verify the server,
// and the error names the flag to set.
func TestProductionRefusesDevelopmentSettings(t *testing.T) {
	bin := build(t, "./services/...")
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	strong := strings.Repeat("k", config.MinSecretLen)
	devJWT := file("dev-jwt", auth.DevSecret+"\n")
	// A database URL production accepts: nothing listens there, so a
	// service that got past its checks fails on connecting instead.
	db := "postgres://nobody@127.0.0.1:1/none?sslmode=verify-full&connect_timeout=1"
	// Mutual TLS flags for the gateway hop; the files are not read before
	// the mode's checks.
	gwTLS := []string{"--gateway-ca-file", "ca.pem", "--gateway-cert-file", "c.pem", "--gateway-key-file", "k.pem"}
	apiOK := []string{"--jwt-secret", strong}
	liveKey := file("live", "sk_live_"+strings.Repeat("x", 24))
	testKey := file("test", "sk_test_"+strings.Repeat("x", 24))
	shortToken := file("token", "short")
	for _, c := range []struct {
		service string
		args    []string
		want    string
	}{
		{"payments-api", []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=disable"}, "--database-url: sslmode is disable"},
		{"payments-api", []string{"--database-url", "postgres://nobody@127.0.0.1:1/none"}, "--database-url: sslmode is not set"},
		{"payments-api", []string{"--database-url", "postgres://app:" + config.DevPrefix + "pg-api@db/none?sslmode=verify-full"}, "--database-url carries a development password"},
		{"payments-api", nil, "no token verifier: set --jwt-jwks-file"},
		{"payments-api", []string{"--jwt-secret", auth.DevSecret}, "--jwt-secret is a development secret"},
		{"payments-api", []string{"--jwt-secret-file", devJWT}, "--jwt-secret is a development secret"},
		{"payments-api", []string{"--jwt-secret", "short"}, "--jwt-secret is 5 bytes"},
		{"admin-api", []string{"--jwt-secret", strong}, "the gateway hop is plaintext"},
		{"admin-api", append([]string{"--jwt-secret", "short"}, gwTLS...), "--jwt-secret is 5 bytes"},
		{"admin-api", append([]string{"--jwt-secret", strong, "--gateway-token-file", shortToken}, gwTLS...), "--gateway-token-file is 5 bytes"},
		{"executor", []string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-client-ca-file", "ca", "--gateway", "stripe",
			"--stripe-key-file", testKey}, "--stripe-key-file holds a Stripe test key"},
		{"payments-api", apiOK, "--cursor-secret is missing"},
		{"payments-api", append(apiOK, "--cursor-secret", config.DevCursorSecret), "--cursor-secret is a development secret"},
		{"executor", nil, "--tls-cert-file"},
		{"executor", []string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-client-ca-file", "ca"}, "--gateway-ca-file, --gateway-cert-file and --gateway-key-file"},
		{"executor", []string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-client-ca-file", "ca", "--gateway-ca-file", "ca.pem"}, "--gateway-cert-file"},
		{"sweeper", nil, "--executor-ca-file"},
		{"reconciler", nil, "--gateway-ca-file"},
		{"reconciler", gwTLS, "--webhook-secret is missing"},
		{"reconciler", append(gwTLS, "--webhook-secret", config.DevWebhookSecret), "--webhook-secret is a development secret"},
		{"reconciler", append(gwTLS, "--gateway", "stripe", "--stripe-key-file", liveKey, "--stripe-api-url", "http://127.0.0.1:12111"), "--stripe-api-url"},
		{"reconciler", append(gwTLS, "--webhook-secret", strong, "--stripe-webhook-secret-file", shortToken), "--stripe-webhook-secret-file is 5 bytes"},
		{"reaper", []string{"--retention", "24h"}, "--retention 24h0m0s is under the floor"},
		{"cdc", nil, "--kafka-tls"},
		{"cdc", []string{"--kafka-tls"}, "--kafka-sasl-mechanism"},
		{"audit-consumer", nil, "--audit-database-url is not set apart"},
		{"audit-consumer", []string{"--audit-database-url", db}, "--audit-database-url is not set apart"},
		{"audit-consumer", []string{"--audit-database-url", "postgres://nobody@127.0.0.1:1/audit?sslmode=disable"}, "--audit-database-url: sslmode is disable"},
		{"audit-consumer", []string{"--audit-database-url", "postgres://nobody@127.0.0.1:1/audit?sslmode=verify-full"}, "--kafka-tls"},
		{"migrate", []string{"--audit-database-url", "postgres://nobody@127.0.0.1:1/audit?sslmode=disable"}, "--audit-database-url: sslmode is disable"},
		{"migrate", []string{"--move-audit-rows"}, "--move-audit-rows needs --audit-database-url"},
		{"reaper", []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=require"}, "sslmode=verify-full"},
		{"migrate", []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=verify-ca"}, "sslmode=verify-full"},
	} {
		t.Run(c.service+"/"+c.want, func(t *testing.T) {
			out := refused(t, bin, c.service, append([]string{"--dev=false", "--database-url", db}, c.args...), c.want)
			// The secret itself is never repeated back.
			for _, s := range []string{strong, auth.DevSecret, config.DevCursorSecret, config.DevWebhookSecret} {
				if strings.Contains(out, s) {
					t.Fatalf("%s printed a secret:\n%s", c.service, out)
				}
			}
		})
	}
}
