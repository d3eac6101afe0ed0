package jsoncodec_test

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paysched/paysched/gen/openapi"
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

// An unset message field is omitted, never null (the OpenAPI schemas type
// them as objects or date-time strings), while scalars, lists and maps are
// always present.
func TestMarshalOmitsUnsetMessages(t *testing.T) {
	cases := []proto.Message{
		&payschedv1.BatchCreateResult{Index: 1, Outcome: payschedv1.BatchCreateResult_OUTCOME_REJECTED},
		&payschedv1.PaymentAttempt{Attempt: 1, StartedAt: timestamppb.Now()},
		&payschedv1.ReconciliationRun{RunId: 1},
		&payschedv1.TriggerReconciliationRunResponse{},
	}
	for _, m := range cases {
		b, err := jsoncodec.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "null") {
			t.Errorf("%T: %s has a null", m, b)
		}
	}
	b, _ := jsoncodec.Marshal(cases[0])
	for _, want := range []string{`"reason":""`, `"fieldViolations":[]`, `"index":1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("BatchCreateResult %s lacks %s", b, want)
		}
	}
	if strings.Contains(string(b), `"payment"`) {
		t.Errorf("BatchCreateResult %s has a payment", b)
	}
}

// Every 64-bit integer field of payments.proto and admin.proto is read as a
// JSON number only and written as one, and both OpenAPI documents type it
// so (integer, format int64; proto/paysched/v1/openapi.yaml lists them).
func TestEveryInt64FieldIsANumber(t *testing.T) {
	defs := map[string]map[string]struct{ Type, Format string }{}
	for _, doc := range [][]byte{openapi.JSON, openapi.AdminJSON} {
		var d struct {
			Definitions map[string]struct {
				Properties map[string]struct{ Type, Format string }
			}
		}
		if err := json.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		for name, def := range d.Definitions {
			if defs[name] == nil {
				defs[name] = map[string]struct{ Type, Format string }{}
			}
			for p, s := range def.Properties {
				defs[name][p] = s
			}
		}
	}
	n := 0
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			md := ms.Get(i)
			walk(md.Messages())
			fs := md.Fields()
			for j := 0; j < fs.Len(); j++ {
				fd := fs.Get(j)
				switch fd.Kind() {
				case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
					protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
				default:
					continue
				}
				n++
				name, where := fd.JSONName(), string(md.FullName())
				m := dynamicpb.NewMessage(md)
				if vs := jsoncodec.Unmarshal([]byte(`{"`+name+`":"5"}`), m); len(vs) != 1 || vs[0].Field != name {
					t.Errorf("%s.%s: a quoted integer gave %v", where, name, vs)
				}
				if vs := jsoncodec.Unmarshal([]byte(`{"`+name+`":5}`), dynamicpb.NewMessage(md)); len(vs) != 0 {
					t.Errorf("%s.%s: a number gave %v", where, name, vs)
				}
				out, err := jsoncodec.Marshal(dynamicpb.NewMessage(md))
				if err != nil || !strings.Contains(string(out), `"`+name+`":0`) {
					t.Errorf("%s.%s: output %s (%v) does not carry it as a number", where, name, out, err)
				}
				if s, ok := defs["v1"+string(md.Name())][name]; ok && (s.Type != "integer" || s.Format != "int64") {
					t.Errorf("%s.%s: the OpenAPI document types it %s/%s, want integer/int64", where, name, s.Type, s.Format)
				}
			}
		}
	}
	walk(payschedv1.File_paysched_v1_payments_proto.Messages())
	walk(payschedv1.File_paysched_v1_admin_proto.Messages())
	if n == 0 {
		t.Fatal("found no int64 field")
	}
}
