// Package kafkatest starts an in-process Kafka-protocol cluster (franz-go's
// kfake) for tests that produce or consume.
package kafkatest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/platform/devtls"
)

// NewCluster starts a one-broker cluster with topics (3 partitions each)
// and returns its seed addresses; it is closed when the test ends.
func NewCluster(t testing.TB, topics ...string) []string {
	t.Helper()
	return start(t, nil, topics)
}

// start runs a one-broker cluster with opts and topics (3 partitions
// each), closed when the test ends, and returns its seed addresses.
func start(t testing.TB, opts []kfake.Opt, topics []string) []string {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(3)}, opts...)
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(3, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// Drain is kafka.Drain (kept here for the tests that use it).
func Drain(ctx context.Context, cl *kgo.Client, enough func() bool, fn func(*kgo.Record)) {
	kafka.Drain(ctx, cl, enough, fn)
}

// Secure is a cluster that takes TLS connections only (its certificate is
// of a throwaway devtls CA), authenticates with SCRAM-SHA-512 and enforces
// ACLs, as the production listener does.
type Secure struct {
	Seeds  []string
	CAFile string
	dir    string
}

// Admin is the user of a Secure cluster that every ACL lets through: what
// tests produce and check with.
const Admin = "admin"

// NewSecureCluster starts a one-broker Secure cluster with topics (3
// partitions each) and users, each granted exactly its grants, besides
// Admin; it is closed when the test ends.
func NewSecureCluster(t testing.TB, users map[string][]kafka.Grant, topics ...string) Secure {
	t.Helper()
	dir := t.TempDir()
	ca, err := devtls.LoadOrCreateCA(dir)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	if err := ca.Issue(dir, "broker", []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	pair, err := devtls.KeyPair(dir, "broker")
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	s := Secure{CAFile: filepath.Join(dir, devtls.CAFile), dir: dir}
	opts := []kfake.Opt{kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}),
		kfake.Superuser(kafkaauth.ScramSHA512, Admin, s.writePassword(t, Admin))}
	for user, grants := range users {
		var acls []kfake.ACL
		for _, g := range grants {
			acls = append(acls, aclsOf(t, g)...)
		}
		opts = append(opts, kfake.User(kafkaauth.ScramSHA512, user, s.writePassword(t, user), acls...))
	}
	s.Seeds = start(t, opts, topics)
	return s
}

// Flags are the client flags of user: TLS with the cluster's CA and
// SCRAM-SHA-512 with the user's password file.
func (s Secure) Flags(user string) kafkaauth.Flags {
	return kafkaauth.Flags{CAFile: s.CAFile, Mechanism: kafkaauth.ScramSHA512, Username: user,
		PasswordFile: filepath.Join(s.dir, user+"-password")}
}

// Opts are user's client options (Flags(user).Opts()).
func (s Secure) Opts(t testing.TB, user string) []kgo.Opt {
	t.Helper()
	f := s.Flags(user)
	opts, err := f.Opts()
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return opts
}

// writePassword makes user a random password and writes it to a file, as
// a Kubernetes Secret mounts it.
func (s Secure) writePassword(t testing.TB, user string) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	pass := hex.EncodeToString(b)
	if err := os.WriteFile(filepath.Join(s.dir, user+"-password"), []byte(pass+"\n"), 0o600); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return pass
}

// aclsOf turns a grant into kfake's ACLs, one per operation.
func aclsOf(t testing.TB, g kafka.Grant) []kfake.ACL {
	t.Helper()
	types := map[string]kmsg.ACLResourceType{"topic": kmsg.ACLResourceTypeTopic, "group": kmsg.ACLResourceTypeGroup}
	patterns := map[string]kmsg.ACLResourcePatternType{"literal": kmsg.ACLResourcePatternTypeLiteral, "prefix": kmsg.ACLResourcePatternTypePrefixed}
	ops := map[string]kmsg.ACLOperation{"Read": kmsg.ACLOperationRead, "Write": kmsg.ACLOperationWrite, "Describe": kmsg.ACLOperationDescribe}
	typ, ok1 := types[g.Type]
	pat, ok2 := patterns[g.Pattern]
	if !ok1 || !ok2 {
		t.Fatalf("kafkatest: grant %+v: unknown type or pattern", g)
	}
	var out []kfake.ACL
	for _, o := range g.Operations {
		op, ok := ops[o]
		if !ok {
			t.Fatalf("kafkatest: grant %+v: unknown operation %s", g, o)
		}
		out = append(out, kfake.ACL{Resource: typ, Name: g.Name, Pattern: pat, Operation: op, Allow: true})
	}
	return out
}
