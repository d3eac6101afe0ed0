package server

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protov2 "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// utf8Codec is gRPC's proto codec, except for requests whose strings are
// not valid UTF-8. proto3 forbids them, and the default codec's refusal
// reaches the client as Internal before any of our code runs. utf8Codec
// instead decodes such a request with every invalid sequence replaced by
// U+FFFD, which validation refuses in every string field (control and
// replacement characters are not allowed), so the client gets
// InvalidArgument naming the field. Anything else that fails to decode
// fails as before.
type utf8Codec struct{ encoding.CodecV2 }

// UTF8Codec is the APIs' server codec (grpc.ForceServerCodecV2): proto,
// with invalid UTF-8 in a request refused as the client's mistake.
func UTF8Codec() encoding.CodecV2 { return utf8Codec{encoding.GetCodecV2(proto.Name)} }

// Unmarshal implements encoding.CodecV2.
func (c utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(protov2.Message)
	if !ok {
		return err
	}
	fixed, changed, ok := replaceInvalidUTF8(data.Materialize(), m.ProtoReflect().Descriptor())
	if !ok || !changed {
		return err
	}
	protov2.Reset(m)
	if protov2.Unmarshal(fixed, m) != nil {
		return err
	}
	return nil
}

// replaceInvalidUTF8 rewrites the string fields of an encoded md (nested
// messages and map entries included) to valid UTF-8. ok is false when b is
// not well-formed protobuf.
func replaceInvalidUTF8(b []byte, md protoreflect.MessageDescriptor) (out []byte, changed, ok bool) {
	out = make([]byte, 0, len(b))
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false, false
		}
		tag := b[:n]
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, false, false
		}
		val := b[n : n+m]
		b = b[n+m:]
		out = append(out, tag...)
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			out = append(out, val...)
			continue
		}
		content, _ := protowire.ConsumeBytes(val)
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(content) {
				content, changed = []byte(strings.ToValidUTF8(string(content), "\uFFFD")), true
			}
		case protoreflect.MessageKind:
			sub, subChanged, subOK := replaceInvalidUTF8(content, fd.Message())
			if !subOK {
				return nil, false, false
			}
			content, changed = sub, changed || subChanged
		}
		out = protowire.AppendBytes(out, content)
	}
	return out, changed, true
}
