package apierr

import (
	"context"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// The API's handlers name invalid fields by their JSON names ("dueAt",
// "items[2].requestId"), which is what REST clients send. gRPC clients
// send proto messages, and google.rpc.BadRequest's documentation asks for
// proto field names there. ProtoFieldNames renames them on the gRPC
// server's way out; the REST gateway calls the handlers in-process, past
// interceptors, and keeps the JSON names.

// ProtoFieldNames is a unary server interceptor that rewrites BadRequest
// field paths from JSON names to proto names.
func ProtoFieldNames() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if err != nil {
			err = protoNames(err)
		}
		return resp, err
	}
}

func protoNames(err error) error {
	st, ok := status.FromError(err)
	if !ok || len(st.Details()) == 0 {
		return err
	}
	out := status.New(st.Code(), st.Message())
	changed := false
	for _, d := range st.Details() {
		m, ok := d.(protoadapt.MessageV1)
		if !ok {
			return err // a detail this code cannot re-attach: leave the error alone
		}
		if br, ok := d.(*errdetails.BadRequest); ok {
			renamed := &errdetails.BadRequest{}
			for _, v := range br.GetFieldViolations() {
				renamed.FieldViolations = append(renamed.FieldViolations, &errdetails.BadRequest_FieldViolation{
					Field: ProtoPath(v.GetField()), Description: v.GetDescription()})
			}
			m, changed = renamed, true
		}
		withD, derr := out.WithDetails(m)
		if derr != nil {
			return err
		}
		out = withD
	}
	if !changed {
		return err
	}
	return out.Err()
}

// ProtoPath turns a JSON field path into proto names: "items[2].dueAt"
// becomes "items[2].due_at". The API's JSON names are lowerCamelCase
// versions of snake_case proto names, so the mapping is mechanical. What
// follows "metadata." is a map key, the client's own text, and is kept.
func ProtoPath(p string) string {
	var b strings.Builder
	b.Grow(len(p) + 4)
	seg := 0 // start of the current segment
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '.' {
			name, _, _ := strings.Cut(p[seg:i], "[")
			b.WriteByte(c)
			if name == "metadata" {
				b.WriteString(p[i+1:])
				return b.String()
			}
			seg = i + 1
			continue
		}
		if c >= 'A' && c <= 'Z' {
			if i > seg && p[i-1] != '[' {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}
