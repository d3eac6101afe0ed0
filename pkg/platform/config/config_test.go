package config_test

import (
	"flag"
	"os"
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
