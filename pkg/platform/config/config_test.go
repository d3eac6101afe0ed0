package config_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paysched/paysched/pkg/platform/config"
)

func TestFlagBeatsEnvBeatsDefault(t *testing.T) {
	t.Setenv("PAYSCHED_HTTP_ADDR", "from-env")
	t.Setenv("PAYSCHED_DB_MAX_CONNS", "7")
	t.Setenv("PAYSCHED_HORIZON", "48h")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	addr := fs.String("http-addr", "default", "")
	conns := fs.Int("db-max-conns", 1, "")
	horizon := fs.Duration("horizon", time.Hour, "")
	other := fs.String("grpc-addr", "default", "")
	if err := config.Parse(fs, []string{"--db-max-conns", "9"}); err != nil {
		t.Fatal(err)
	}
	if *addr != "from-env" || *conns != 9 || *horizon != 48*time.Hour || *other != "default" {
		t.Fatalf("got %q %d %v %q", *addr, *conns, *horizon, *other)
	}
	t.Setenv("PAYSCHED_DB_MAX_CONNS", "many")
	fs2 := flag.NewFlagSet("y", flag.ContinueOnError)
	fs2.Int("db-max-conns", 1, "")
	if err := config.Parse(fs2, nil); err == nil {
		t.Fatal("a bad environment value must be an error")
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if s, err := config.ReadSecret(write("ok", "  s3cr3t\n")); err != nil || s != "s3cr3t" {
		t.Fatalf("got %q %v, want the trimmed secret", s, err)
	}
	if _, err := config.ReadSecret(write("empty", " \n")); err == nil {
		t.Fatal("an empty secret file was accepted")
	}
	if _, err := config.ReadSecret(dir + "/missing"); err == nil {
		t.Fatal("a missing secret file was accepted")
	}
}

func TestModeSecrets(t *testing.T) {
	strong := strings.Repeat("x", config.MinSecretLen)
	file := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(file, []byte(" "+strong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prod, dev := &config.Mode{}, &config.Mode{Dev: true}
	for _, tc := range []struct {
		name     string
		s        config.Secret
		prodErr  string // "" accepted
		devValue string
	}{
		{"missing", config.Secret{Name: "jwt-secret"}, "--jwt-secret is missing", "fallback"},
		{"published", config.Secret{Name: "jwt-secret", Value: config.DevJWTSecret}, "development secret", config.DevJWTSecret},
		{"any paysched-dev- value", config.Secret{Name: "cursor-secret", Value: config.DevPrefix + strong}, "development secret", config.DevPrefix + strong},
		{"short", config.Secret{Name: "cursor-secret", Value: "abc"}, "is 3 bytes", "abc"},
		{"strong", config.Secret{Name: "cursor-secret", Value: strong}, "", strong},
		{"from a file, trimmed", config.Secret{Name: "cursor-secret", File: file}, "", strong},
		{"both", config.Secret{Name: "cursor-secret", File: file, Value: strong}, "both set", ""},
		{"missing file", config.Secret{Name: "cursor-secret", File: file + ".missing"}, "--cursor-secret-file", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			v, err := prod.Secret(&s, "fallback")
			if tc.prodErr == "" {
				if err != nil || v != strong {
					t.Fatalf("production: %q %v, want it accepted", v, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.prodErr) {
				t.Fatalf("production: %v, want %q", err, tc.prodErr)
			} else if strings.Contains(err.Error(), strong) || strings.Contains(err.Error(), config.DevJWTSecret) {
				t.Fatalf("the error shows the secret: %v", err)
			}
			v, err = dev.Secret(&s, "fallback")
			if tc.devValue == "" {
				if err == nil {
					t.Fatal("development accepted an unreadable secret")
				}
				return
			}
			if err != nil || v != tc.devValue {
				t.Fatalf("development: %q %v, want %q", v, err, tc.devValue)
			}
		})
	}
}

func TestModeDatabaseURL(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	prod, dev := &config.Mode{}, &config.Mode{Dev: true}
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"postgres://app@db:5432/paysched?sslmode=verify-full", true},
		{"postgres://app@db:5432/paysched?sslmode=verify-ca", false},
		{"postgres://app@db:5432/paysched?sslmode=require", false},
		{"postgres://app@db:5432/paysched?sslmode=disable", false},
		{"postgres://app@db:5432/paysched", false},
		{"host=db dbname=paysched sslmode=verify-full", true},
		{"host=db dbname=paysched sslmode=prefer", false},
		{"postgres:///paysched?host=/var/run/postgresql", true},
		{"postgres://app:" + config.DevPrefix + "pg@db/paysched?sslmode=verify-full", false},
	} {
		err := prod.DatabaseURL("--database-url", tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("production %q: %v, want ok=%v", tc.url, err, tc.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "--database-url") || strings.Contains(err.Error(), config.DevPrefix)) {
			t.Errorf("production %q: %v: want the flag named and no password shown", tc.url, err)
		}
		if err := dev.DatabaseURL("--database-url", tc.url); err != nil {
			t.Errorf("development %q: %v", tc.url, err)
		}
	}
	t.Setenv("PGSSLMODE", "verify-full")
	if err := prod.DatabaseURL("--database-url", "postgres://app@db/paysched"); err != nil {
		t.Errorf("PGSSLMODE=verify-full: %v", err)
	}
	if err := dev.DatabaseURL("--database-url", "postgres://%zz"); err == nil {
		t.Error("an unparsable URL was accepted in development")
	}
}
