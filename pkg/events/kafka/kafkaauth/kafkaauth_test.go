package kafkaauth_test

import (
	"context"
	"crypto/tls"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/devtls"
)

const secret = "s3cret-Pa55"

// files writes what the tests point the flags at, in a fresh directory.
type files struct {
	dir, pass, empty, ca, notPEM, cert, key, missing string
}

func writeFiles(t *testing.T) files {
	t.Helper()
	dir := t.TempDir()
	ca, err := devtls.LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"broker", "client"} {
		if err := ca.Issue(dir, name, []string{"127.0.0.1", "localhost"}); err != nil {
			t.Fatal(err)
		}
	}
	f := files{dir: dir, pass: filepath.Join(dir, "password"), empty: filepath.Join(dir, "empty"),
		ca: filepath.Join(dir, devtls.CAFile), notPEM: filepath.Join(dir, "not-pem"),
		cert: filepath.Join(dir, "client.pem"), key: filepath.Join(dir, "client-key.pem"),
		missing: filepath.Join(dir, "missing")}
	// The trailing newline a Secret or an editor leaves is trimmed.
	for path, content := range map[string]string{f.pass: secret + "\n", f.empty: " \n", f.notPEM: secret} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestValidate(t *testing.T) {
	f := writeFiles(t)
	for _, tc := range []struct {
		name  string
		flags kafkaauth.Flags
		err   string // a substring of the error; empty: valid
		opts  int
	}{
		{name: "plaintext", flags: kafkaauth.Flags{}},
		{name: "tls system roots", flags: kafkaauth.Flags{TLS: true}, opts: 1},
		{name: "ca implies tls", flags: kafkaauth.Flags{CAFile: f.ca}, opts: 1},
		{name: "mtls", flags: kafkaauth.Flags{CAFile: f.ca, CertFile: f.cert, KeyFile: f.key}, opts: 1},
		{name: "scram-512 over tls", flags: kafkaauth.Flags{CAFile: f.ca, Mechanism: "SCRAM-SHA-512", Username: "cdc", PasswordFile: f.pass}, opts: 2},
		{name: "scram-256 over tls", flags: kafkaauth.Flags{TLS: true, Mechanism: "SCRAM-SHA-256", Username: "cdc", PasswordFile: f.pass}, opts: 2},
		{name: "plain over tls", flags: kafkaauth.Flags{TLS: true, Mechanism: "PLAIN", Username: "cdc", PasswordFile: f.pass}, opts: 2},
		{name: "scram plaintext allowed", flags: kafkaauth.Flags{Mechanism: "SCRAM-SHA-256", Username: "cdc", PasswordFile: f.pass, AllowPlaintextSASL: true}, opts: 1},

		{name: "unknown mechanism", flags: kafkaauth.Flags{TLS: true, Mechanism: "GSSAPI", Username: "cdc", PasswordFile: f.pass}, err: "--kafka-sasl-mechanism \"GSSAPI\""},
		{name: "lower-case mechanism", flags: kafkaauth.Flags{TLS: true, Mechanism: "scram-sha-512", Username: "cdc", PasswordFile: f.pass}, err: "--kafka-sasl-mechanism"},
		{name: "scram without tls", flags: kafkaauth.Flags{Mechanism: "SCRAM-SHA-512", Username: "cdc", PasswordFile: f.pass}, err: "without TLS"},
		{name: "plain without tls", flags: kafkaauth.Flags{Mechanism: "PLAIN", Username: "cdc", PasswordFile: f.pass}, err: "--kafka-allow-plaintext-sasl"},
		{name: "username without mechanism", flags: kafkaauth.Flags{TLS: true, Username: "cdc"}, err: "--kafka-username needs --kafka-sasl-mechanism"},
		{name: "password without mechanism", flags: kafkaauth.Flags{TLS: true, PasswordFile: f.pass}, err: "--kafka-password-file needs --kafka-sasl-mechanism"},
		{name: "mechanism without username", flags: kafkaauth.Flags{TLS: true, Mechanism: "SCRAM-SHA-512", PasswordFile: f.pass}, err: "needs --kafka-username"},
		{name: "mechanism without password", flags: kafkaauth.Flags{TLS: true, Mechanism: "SCRAM-SHA-512", Username: "cdc"}, err: "needs --kafka-password-file"},
		{name: "password file missing", flags: kafkaauth.Flags{TLS: true, Mechanism: "SCRAM-SHA-512", Username: "cdc", PasswordFile: f.missing}, err: "--kafka-password-file"},
		{name: "password file empty", flags: kafkaauth.Flags{TLS: true, Mechanism: "SCRAM-SHA-512", Username: "cdc", PasswordFile: f.empty}, err: "is empty"},
		{name: "ca missing", flags: kafkaauth.Flags{CAFile: f.missing}, err: "--kafka-ca-file"},
		{name: "ca not pem", flags: kafkaauth.Flags{CAFile: f.notPEM}, err: "--kafka-ca-file"},
		{name: "cert without key", flags: kafkaauth.Flags{CertFile: f.cert}, err: "--kafka-cert-file needs --kafka-key-file"},
		{name: "key without cert", flags: kafkaauth.Flags{KeyFile: f.key}, err: "--kafka-key-file needs --kafka-cert-file"},
		{name: "key not pem", flags: kafkaauth.Flags{CertFile: f.cert, KeyFile: f.notPEM}, err: "--kafka-cert-file/--kafka-key-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.flags.Opts()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Opts: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Opts error %v, want one containing %q", err, tc.err)
			case err != nil && strings.Contains(err.Error(), secret):
				t.Fatalf("the error shows the secret: %v", err)
			case err == nil && len(opts) != tc.opts:
				t.Fatalf("%d options, want %d", len(opts), tc.opts)
			}
			if verr := tc.flags.Validate(); (verr == nil) != (err == nil) {
				t.Fatalf("Validate() = %v, Opts error %v", verr, err)
			}
		})
	}
}

func TestTLSConfig(t *testing.T) {
	f := writeFiles(t)
	fl := kafkaauth.Flags{CAFile: f.ca, ServerName: "kafka.example", CertFile: f.cert, KeyFile: f.key}
	cfg, err := fl.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := devtls.LoadOrCreateCA(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.RootCAs.Equal(ca.Pool()) || cfg.ServerName != "kafka.example" || len(cfg.Certificates) != 1 || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("TLS config: roots %v, server name %q, %d certificates, min version %x", cfg.RootCAs, cfg.ServerName, len(cfg.Certificates), cfg.MinVersion)
	}
	if cfg, err := (&kafkaauth.Flags{}).TLSConfig(); cfg != nil || err != nil {
		t.Fatalf("no TLS flags: %v, %v", cfg, err)
	}
}

// TestRegisterReadsEnvironment: the flags follow the repository's
// convention, each read from PAYSCHED_<FLAG> when not given.
func TestRegisterReadsEnvironment(t *testing.T) {
	t.Setenv("PAYSCHED_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
	t.Setenv("PAYSCHED_KAFKA_USERNAME", "paysched-cdc")
	t.Setenv("PAYSCHED_KAFKA_PASSWORD_FILE", "/etc/kafka-user/password")
	t.Setenv("PAYSCHED_KAFKA_CA_FILE", "/etc/kafka-ca/ca.crt")
	t.Setenv("PAYSCHED_KAFKA_TLS", "true")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fl := kafkaauth.Register(fs)
	if err := config.Parse(fs, []string{"--kafka-username", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	want := kafkaauth.Flags{TLS: true, CAFile: "/etc/kafka-ca/ca.crt", Mechanism: "SCRAM-SHA-512", Username: "from-flag", PasswordFile: "/etc/kafka-user/password"}
	if *fl != want {
		t.Fatalf("flags %+v, want %+v", *fl, want)
	}
}

// cluster starts a one-broker kfake cluster with topic "t" and opts.
func cluster(t *testing.T, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(1, "t")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// client is a client of seeds with the flags' options, reading "t" from
// the start.
func client(t *testing.T, seeds []string, fl kafkaauth.Flags) *kgo.Client {
	t.Helper()
	opts, err := fl.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// roundTrip produces value to "t" with the flags' client, then reads "t"
// from the start, returning every value read or the first error.
func roundTrip(t *testing.T, seeds []string, fl kafkaauth.Flags, value string) ([]string, error) {
	t.Helper()
	cl := client(t, seeds, fl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(value)}).FirstErr(); err != nil {
		return nil, err
	}
	var got []string
	for len(got) == 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return got, err
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got, nil
}

// readAll reads "t" from the start until a second passes without a record.
func readAll(t *testing.T, seeds []string, fl kafkaauth.Flags) []string {
	t.Helper()
	cl := client(t, seeds, fl)
	var got []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := len(got)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		if len(got) == n {
			return got
		}
	}
}

// checkRefused: the broker refuses the flags' client (Ping names why),
// which then neither produces nor reads anything. Producing and reading
// are tried for a second each: the client retries a refused connection
// until its context ends.
func checkRefused(t *testing.T, seeds []string, fl kafkaauth.Flags) {
	t.Helper()
	cl := client(t, seeds, fl)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := cl.Ping(ctx)
	if err == nil {
		t.Fatal("the broker accepted the client")
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatalf("the error shows the secret: %v", err)
	}
	t.Logf("refused: %v", err)
	pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
	defer pcancel()
	if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "t", Value: []byte("refused")}).FirstErr(); err == nil {
		t.Error("the refused client produced")
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	for cctx.Err() == nil {
		cl.PollFetches(cctx).EachRecord(func(r *kgo.Record) { t.Errorf("the refused client read %q", r.Value) })
	}
}

// TestSCRAM: against a broker that requires SASL, the right SCRAM
// credentials produce and consume; a wrong password, the wrong mechanism
// or no SASL is refused and writes and reads nothing.
func TestSCRAM(t *testing.T) {
	f := writeFiles(t)
	wrong := filepath.Join(f.dir, "wrong")
	if err := os.WriteFile(wrong, []byte("not-"+secret), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mech := range []string{kafkaauth.ScramSHA256, kafkaauth.ScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			seeds := cluster(t, kfake.EnableSASL(), kfake.Superuser(mech, "paysched-cdc", secret))
			other := map[string]string{kafkaauth.ScramSHA256: kafkaauth.ScramSHA512, kafkaauth.ScramSHA512: kafkaauth.ScramSHA256}[mech]
			good := kafkaauth.Flags{Mechanism: mech, Username: "paysched-cdc", PasswordFile: f.pass, AllowPlaintextSASL: true}
			refused := map[string]kafkaauth.Flags{
				"wrong password":  {Mechanism: mech, Username: "paysched-cdc", PasswordFile: wrong, AllowPlaintextSASL: true},
				"unknown user":    {Mechanism: mech, Username: "someone", PasswordFile: f.pass, AllowPlaintextSASL: true},
				"other mechanism": {Mechanism: other, Username: "paysched-cdc", PasswordFile: f.pass, AllowPlaintextSASL: true},
				"no sasl":         {},
			}
			if got, err := roundTrip(t, seeds, good, "good"); err != nil || len(got) != 1 || got[0] != "good" {
				t.Fatalf("right credentials: read %v, error %v; want [good]", got, err)
			}
			t.Run("refused", func(t *testing.T) {
				for name, fl := range refused {
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						checkRefused(t, seeds, fl)
					})
				}
			})
			// The refused clients wrote nothing.
			if got := readAll(t, seeds, good); len(got) != 1 || got[0] != "good" {
				t.Fatalf("the topic holds %v, want only [good]", got)
			}
		})
	}
}

// TestTLS: kfake serves TLS with a certificate of a devtls CA. The client
// trusting the CA connects (with SCRAM on top, as in production, and with
// a client certificate where the broker requires one); one trusting only
// the system roots, expecting another name or connecting in plaintext does
// not.
func TestTLS(t *testing.T) {
	f := writeFiles(t)
	ca, err := devtls.LoadOrCreateCA(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := devtls.KeyPair(f.dir, "broker")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	mutualTLS := serverTLS.Clone()
	mutualTLS.ClientAuth = tls.RequireAndVerifyClientCert
	mutualTLS.ClientCAs = ca.Pool()
	scramOverTLS := kafkaauth.Flags{CAFile: f.ca, Mechanism: kafkaauth.ScramSHA512, Username: "paysched-audit", PasswordFile: f.pass}
	for _, tc := range []struct {
		name   string
		server []kfake.Opt
		flags  kafkaauth.Flags
		ok     bool
	}{
		{"ca", []kfake.Opt{kfake.TLS(serverTLS)}, kafkaauth.Flags{CAFile: f.ca}, true},
		{"ca and server name", []kfake.Opt{kfake.TLS(serverTLS)}, kafkaauth.Flags{CAFile: f.ca, ServerName: "localhost"}, true},
		{"scram-512 over tls", []kfake.Opt{kfake.TLS(serverTLS), kfake.EnableSASL(), kfake.Superuser(kafkaauth.ScramSHA512, "paysched-audit", secret)}, scramOverTLS, true},
		{"client certificate", []kfake.Opt{kfake.TLS(mutualTLS)}, kafkaauth.Flags{CAFile: f.ca, CertFile: f.cert, KeyFile: f.key}, true},

		{"system roots", []kfake.Opt{kfake.TLS(serverTLS)}, kafkaauth.Flags{TLS: true}, false},
		{"wrong server name", []kfake.Opt{kfake.TLS(serverTLS)}, kafkaauth.Flags{CAFile: f.ca, ServerName: "kafka.invalid"}, false},
		{"plaintext", []kfake.Opt{kfake.TLS(serverTLS)}, kafkaauth.Flags{}, false},
		{"no client certificate", []kfake.Opt{kfake.TLS(mutualTLS)}, kafkaauth.Flags{CAFile: f.ca}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seeds := cluster(t, tc.server...)
			if !tc.ok {
				checkRefused(t, seeds, tc.flags)
				return
			}
			if got, err := roundTrip(t, seeds, tc.flags, "v"); err != nil || len(got) != 1 || got[0] != "v" {
				t.Fatalf("read %v, error %v; want [v]", got, err)
			}
		})
	}
}

// TestOptsForMode: what a service's main asks for is refused in production
// while the connection is plaintext or anonymous, and given in development.
func TestOptsForMode(t *testing.T) {
	plain := &kafkaauth.Flags{}
	if _, err := plain.OptsFor(&config.Mode{}); err == nil || !strings.Contains(err.Error(), "--kafka-tls") {
		t.Errorf("plaintext in production: %v, want a refusal naming --kafka-tls", err)
	}
	if opts, err := plain.OptsFor(&config.Mode{Dev: true}); err != nil || len(opts) != 0 {
		t.Errorf("plaintext in development: %d options, %v; want none, nil", len(opts), err)
	}
	// A flag error is told in development too.
	bad := &kafkaauth.Flags{Mechanism: "KERBEROS"}
	if _, err := bad.OptsFor(&config.Mode{Dev: true}); err == nil {
		t.Error("an unknown SASL mechanism in development: accepted")
	}
}
