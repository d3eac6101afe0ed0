package k8s_test

import (
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/paysched/paysched/pkg/platform/config"
)

// docker-compose.yml cannot run here (no Docker engine), so this keeps it
// honest: it parses, every service's PAYSCHED_* variables are flags of
// that service, and every depends_on names a service.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			DependsOn   map[string]any    `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, want := range []string{"postgres", "kafka", "migrate", "payments-api", "admin-api", "gateway-sim", "executor", "sweeper",
		"reaper", "cdc", "audit-consumer", "webhook-dispatcher", "reconciler"} {
		if _, ok := doc.Services[want]; !ok {
			t.Errorf("service %s missing", want)
		}
	}
	for name, s := range doc.Services {
		for dep := range s.DependsOn {
			if _, ok := doc.Services[dep]; !ok {
				t.Errorf("%s depends on unknown service %s", name, dep)
			}
		}
		if s.Image != "paysched:dev" && s.Image != "paysched-tools:dev" {
			continue // postgres, kafka: images of their own
		}
		fl := flags(t, s.Command[0])
		if fl == nil {
			t.Errorf("%s runs %q, which is not a service", name, s.Command[0])
			continue
		}
		for k := range s.Environment {
			if !strings.HasPrefix(k, "PAYSCHED_") {
				continue
			}
			flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "PAYSCHED_")), "_", "-")
			if !fl[flag] && !shared[k] {
				t.Errorf("%s: %s is not a flag of %s", name, k, s.Command[0])
			}
		}
	}
}

// shared variables sit in the common environment of every service; each
// service reads those it has flags for.
var shared = map[string]bool{"PAYSCHED_DEV": true, "PAYSCHED_DATABASE_URL": true, "PAYSCHED_JWT_SECRET": true,
	"PAYSCHED_CURSOR_SECRET": true, "PAYSCHED_GATEWAY_ADDR": true, "PAYSCHED_WEBHOOK_SECRET": true}

// TestComposeHasNoPublishedSecrets: compose runs in development mode, but
// with the secrets its user sets (no default, no published value), the
// API published on loopback only, and every image it pulls pinned by
// digest.
func TestComposeHasNoPublishedSecrets(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), config.DevPrefix) {
		t.Errorf("docker-compose.yml carries a published development value (%s...)", config.DevPrefix)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Build       any               `yaml:"build"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for name, s := range doc.Services {
		for k, v := range s.Environment {
			if strings.HasSuffix(k, "_SECRET") && !strings.Contains(v, ":?") {
				t.Errorf("%s: %s=%q must be required from the user (${%s:?...}), never defaulted", name, k, v, k)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %s beyond loopback", name, p)
			}
		}
		if s.Build == nil && !strings.Contains(s.Image, "@sha256:") {
			t.Errorf("%s: image %s is not pinned by digest", name, s.Image)
		}
	}
}

// composeDBs is where each database URL flag must point in compose: the
// schedule on the postgres service, the audit log and the webhooks on
// postgres-events (issue 42: cdc's walsender then reads only the
// schedule's WAL).
var composeDBs = map[string]struct{ host, database string }{
	"database-url":          {"postgres:5432", "paysched"},
	"audit-database-url":    {"postgres-events:5432", "paysched_audit"},
	"webhooks-database-url": {"postgres-events:5432", "paysched_webhooks"},
}

// TestComposeEventsDatabases: compose runs the events' databases on a
// Postgres service of their own, without logical WAL; every paysched
// process sets each of its database URL flags to the service and database
// composeDBs names, and no database URL it has no flag for (the
// webhook-dispatcher is never given the schedule's); the migration waits
// for both servers.
func TestComposeEventsDatabases(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			DependsOn   map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	schedule, events := doc.Services["postgres"], doc.Services["postgres-events"]
	if events.Image == "" {
		t.Fatal("no postgres-events service")
	}
	if !slices.Contains(schedule.Command, "wal_level=logical") {
		t.Error("postgres runs without wal_level=logical: cdc cannot stream")
	}
	if slices.Contains(events.Command, "wal_level=logical") {
		t.Error("postgres-events writes logical WAL, which nothing decodes")
	}
	for name, s := range doc.Services {
		if s.Image != "paysched:dev" {
			continue // Postgres, Kafka, gateway-sim (its own database)
		}
		fl := flags(t, s.Command[0])
		for k, v := range s.Environment {
			if !strings.HasSuffix(k, "DATABASE_URL") {
				continue
			}
			flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "PAYSCHED_")), "_", "-")
			if !fl[flag] {
				t.Errorf("%s is given %s=%s, a database it has no flag for", name, k, v)
			}
		}
		for flag, want := range composeDBs {
			if !fl[flag] {
				continue
			}
			k := config.EnvName(flag)
			u, err := url.Parse(s.Environment[k])
			if err != nil || s.Environment[k] == "" {
				t.Errorf("%s: %s is not set (%v): want %s on %s", name, k, err, want.database, want.host)
				continue
			}
			if u.Host != want.host || u.Path != "/"+want.database {
				t.Errorf("%s: %s = %s, want %s on %s", name, k, s.Environment[k], want.database, want.host)
			}
		}
	}
	for _, pg := range []string{"postgres", "postgres-events"} {
		if doc.Services["migrate"].DependsOn[pg].Condition != "service_healthy" {
			t.Errorf("migrate does not wait for %s to be healthy", pg)
		}
	}
}
