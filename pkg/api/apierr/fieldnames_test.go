package apierr

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestProtoPath(t *testing.T) {
	for in, want := range map[string]string{
		"dueAt": "due_at", "payee": "payee", "items[2].requestId": "items[2].request_id",
		"idempotencyKey": "idempotency_key", "body": "body", "metadata.someKey": "metadata.someKey", "items[0].metadata.aB": "items[0].metadata.aB", "": "",
	} {
		if got := ProtoPath(in); got != want {
			t.Errorf("ProtoPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProtoNamesKeepsTheRestOfTheError(t *testing.T) {
	err := protoNames(Invalid("bad", []Violation{{Field: "dueAt", Description: "must be in the future"}}))
	vs := Violations(err)
	if Reason(err) != ReasonValidation || len(vs) != 1 || vs[0].Field != "due_at" || vs[0].Description != "must be in the future" {
		t.Fatalf("got %v %v", err, vs)
	}
	plain := errors.New("x")
	if protoNames(plain) != plain {
		t.Fatal("a non-status error changed")
	}
	nf := New(codes.NotFound, ReasonNotFound, "no", nil)
	if protoNames(nf) != nf {
		t.Fatal("an error without a BadRequest changed")
	}
}
