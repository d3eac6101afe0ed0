package jsoncodec_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/jsoncodec"
)

func TestMarshalWritesInt64AsNumbers(t *testing.T) {
	p := &payschedv1.ScheduledPayment{PaymentId: "x", Amount: 9007199254740993, DueAt: timestamppb.New(timestamppb.Now().AsTime()), Payee: "<&>"}
	b, err := jsoncodec.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, `"amount":9007199254740993`) || !strings.Contains(s, `"payee":"<&>"`) {
		t.Fatalf("got %s", s)
	}
	again, _ := jsoncodec.Marshal(p)
	if string(again) != s {
		t.Fatal("output not stable")
	}
}

func TestUnmarshalReportsEveryField(t *testing.T) {
	cases := []struct {
		body   string
		fields []string
	}{
		{`{"payee":"a","amount":5}`, nil},
		{`{"amount":"5"}`, []string{"amount"}},
		{`{"amount":5.0}`, []string{"amount"}},
		{`{"amount":-0}`, nil},
		{`{"payee":1,"dueAt":"x","nope":null}`, []string{"payee", "dueAt", "nope"}},
		{`{"metadata":{"a":["b"]}}`, []string{"metadata"}},
		{`{"payee":null}`, nil},
		{`null`, []string{"body"}},
		{`"x"`, []string{"body"}},
	}
	for _, c := range cases {
		var m payschedv1.CreateScheduledPaymentRequest
		vs := jsoncodec.Unmarshal([]byte(c.body), &m)
		got := map[string]bool{}
		for _, v := range vs {
			got[v.Field] = true
		}
		if len(got) != len(c.fields) {
			t.Errorf("%s: violations %v, want %v", c.body, vs, c.fields)
		}
		for _, f := range c.fields {
			if !got[f] {
				t.Errorf("%s: no violation for %s (%v)", c.body, f, vs)
			}
		}
	}
	var b payschedv1.BatchCreateScheduledPaymentsRequest
	vs := jsoncodec.Unmarshal([]byte(`{"items":[{"amount":1},{"amount":"2","x":1}]}`), &b)
	if len(vs) != 2 || vs[0].Field != "items[1].amount" || vs[1].Field != "items[1].x" {
		t.Fatalf("nested: %v", vs)
	}
}
