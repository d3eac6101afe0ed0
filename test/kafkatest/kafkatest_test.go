package kafkatest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/test/kafkatest"
)

func TestClusterRoundTrip(t *testing.T) {
	seeds := kafkatest.NewCluster(t, "t1")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("t1"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t1", Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fs := cl.PollFetches(ctx)
	if errs := fs.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "v" {
		t.Fatalf("records: %v", recs)
	}
}

// TestSecureClusterEnforcesGrants: a user of a Secure cluster does what
// its grants allow and nothing else.
func TestSecureClusterEnforcesGrants(t *testing.T) {
	s := kafkatest.NewSecureCluster(t, map[string][]kafka.Grant{
		"writer": {{Type: "topic", Name: "t1", Pattern: "literal", Operations: []string{"Write", "Describe"}}},
	}, "t1", "t2")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.Seeds...)}, s.Opts(t, "writer")...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.ProduceSync(ctx, &kgo.Record{Topic: "t1", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("granted write: %v", err)
	}
	if err := w.ProduceSync(ctx, &kgo.Record{Topic: "t2", Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("write to t2 without a grant: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	r, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.Seeds...), kgo.ConsumeTopics("t1"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, s.Opts(t, "writer")...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fs := r.PollFetches(ctx)
	if err := fs.Err(); !errors.Is(err, kerr.TopicAuthorizationFailed) || len(fs.Records()) > 0 {
		t.Fatalf("read t1 without a grant: %d records, error %v; want none and TOPIC_AUTHORIZATION_FAILED", len(fs.Records()), err)
	}
}
