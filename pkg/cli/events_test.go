package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paysched/paysched/pkg/cli"
)

// TestEventsTailKafkaSecurity: `payctl events tail` takes the Kafka
// security flags, each also from its PAYSCHED_* variable, and refuses a
// bad combination before it connects.
func TestEventsTailKafkaSecurity(t *testing.T) {
	pass := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		err  string
	}{
		{"sasl from env without tls", map[string]string{"PAYSCHED_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "PAYSCHED_KAFKA_USERNAME": "u", "PAYSCHED_KAFKA_PASSWORD_FILE": pass},
			nil, "--kafka-sasl-mechanism SCRAM-SHA-512 without TLS"},
		{"flag beats env", map[string]string{"PAYSCHED_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "PAYSCHED_KAFKA_USERNAME": "u", "PAYSCHED_KAFKA_PASSWORD_FILE": pass},
			[]string{"--kafka-sasl-mechanism", "GSSAPI"}, `--kafka-sasl-mechanism "GSSAPI"`},
		{"missing ca from flag", nil, []string{"--kafka-ca-file", filepath.Join(t.TempDir(), "ca.crt")}, "--kafka-ca-file"},
		{"bad bool in env", map[string]string{"PAYSCHED_KAFKA_TLS": "maybe"}, nil, "PAYSCHED_KAFKA_TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			root := cli.New()
			root.SetArgs(append([]string{"events", "tail", "--kafka-brokers", "127.0.0.1:1"}, tc.args...))
			root.SetOut(&bytes.Buffer{})
			root.SetErr(&bytes.Buffer{})
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}
