// Package jsoncodec is the REST API's JSON codec for protobuf messages. It is
// stricter than protojson on input and friendlier on output:
//   - input: unknown fields, wrong types and integers sent as strings or with
//     fractions are reported per field (a field path and what is wrong), so a
//     client learns every mistake at once;
//   - output: 64-bit integers are JSON numbers, as money amounts should read,
//     not the quoted strings protojson emits; every scalar, list and map is
//     present, and a message field is omitted when unset (never null), as
//     the OpenAPI documents say.
package jsoncodec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/paysched/paysched/pkg/api/apierr"
)

var (
	// EmitDefaultValues, not EmitUnpopulated: the latter writes an unset
	// message field as null, which the documents' object schemas refuse.
	marshalOpts   = protojson.MarshalOptions{EmitDefaultValues: true}
	unmarshalOpts = protojson.UnmarshalOptions{}
)

// Unmarshal decodes raw into m. It returns every violation found; when there
// are some, m still holds the fields that were fine (best effort), so that a
// caller can add its own checks of those and report everything at once.
func Unmarshal(raw []byte, m proto.Message) []apierr.Violation {
	md := m.ProtoReflect().Descriptor()
	var vs []apierr.Violation
	check(raw, md, "", &vs)
	if len(vs) == 0 {
		err := unmarshalOpts.Unmarshal(raw, m)
		if err == nil {
			return nil
		}
		proto.Reset(m)
		locate(raw, md, "", nil, &vs)
		if len(vs) == 0 {
			return []apierr.Violation{{Field: "body", Description: "invalid JSON: " + cleanErr(err)}}
		}
	} else {
		// Fields check already faulted need no second opinion from locate.
		skip := map[string]bool{}
		for _, v := range vs {
			skip[TopField(v.Field)] = true
		}
		locate(raw, md, "", skip, &vs)
	}
	vs = dedupe(vs)
	partial(raw, m, vs)
	return vs
}

// partial decodes the top-level fields of raw that have no violation.
func partial(raw []byte, m proto.Message, vs []apierr.Violation) {
	obj, ok := object(raw)
	if !ok {
		return
	}
	for _, v := range vs {
		delete(obj, TopField(v.Field))
	}
	md := m.ProtoReflect().Descriptor()
	for k := range obj {
		if field(md, k) == nil {
			delete(obj, k)
		}
	}
	rest, err := json.Marshal(obj)
	if err != nil {
		return
	}
	if unmarshalOpts.Unmarshal(rest, m) != nil {
		proto.Reset(m)
	}
}

// TopField is the top-level field of a violation path: "items[2].amount"
// gives "items", "metadata.k" gives "metadata".
func TopField(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

func dedupe(vs []apierr.Violation) []apierr.Violation {
	seen := map[string]bool{}
	out := vs[:0]
	for _, v := range vs {
		if !seen[v.Field] {
			seen[v.Field] = true
			out = append(out, v)
		}
	}
	return out
}

// check walks raw against md without protojson: unknown fields and integer
// encodings. Types it does not check here are found by locate.
func check(raw []byte, md protoreflect.MessageDescriptor, path string, vs *[]apierr.Violation) {
	obj, ok := object(raw)
	if !ok {
		*vs = append(*vs, apierr.Violation{Field: orBody(path), Description: "must be a JSON object"})
		return
	}
	for _, key := range sortedKeys(obj) {
		val := obj[key]
		fd := field(md, key)
		if fd == nil {
			*vs = append(*vs, apierr.Violation{Field: join(path, key), Description: "unknown field"})
			continue
		}
		if isNull(val) {
			continue
		}
		fp := join(path, fd.JSONName())
		switch {
		case fd.IsMap():
			// Values are checked by protojson (locate).
		case fd.IsList():
			var elems []json.RawMessage
			if err := json.Unmarshal(val, &elems); err != nil {
				*vs = append(*vs, apierr.Violation{Field: fp, Description: "must be a JSON array"})
				continue
			}
			for i, e := range elems {
				ep := fmt.Sprintf("%s[%d]", fp, i)
				switch {
				case isPlainMessage(fd):
					check(e, fd.Message(), ep, vs)
				case isInt(fd.Kind()):
					checkInt(e, fd.Kind(), ep, vs)
				}
			}
		case isPlainMessage(fd):
			check(val, fd.Message(), fp, vs)
		case isInt(fd.Kind()):
			checkInt(val, fd.Kind(), fp, vs)
		}
	}
}

var intLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

func checkInt(val json.RawMessage, k protoreflect.Kind, path string, vs *[]apierr.Violation) {
	s := string(bytes.TrimSpace(val))
	bad := func(d string) { *vs = append(*vs, apierr.Violation{Field: path, Description: d}) }
	switch {
	case strings.HasPrefix(s, `"`):
		bad("must be an integer JSON number, not a string")
	case !intLiteral.MatchString(s):
		bad("must be an integer")
	default:
		var err error
		switch k {
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			_, err = strconv.ParseInt(s, 10, 32)
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			_, err = strconv.ParseUint(s, 10, 32)
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			_, err = strconv.ParseUint(s, 10, 64)
		default:
			_, err = strconv.ParseInt(s, 10, 64)
		}
		if err != nil {
			bad("integer out of range")
		}
	}
}

// locate finds which fields protojson rejects by decoding them one at a time.
// It runs only for bodies that already failed, so its cost does not matter.
func locate(raw []byte, md protoreflect.MessageDescriptor, path string, skip map[string]bool, vs *[]apierr.Violation) {
	obj, ok := object(raw)
	if !ok {
		*vs = append(*vs, apierr.Violation{Field: orBody(path), Description: "must be a JSON object"})
		return
	}
	for _, key := range sortedKeys(obj) {
		fd := field(md, key)
		if fd == nil || skip[key] || skip[fd.JSONName()] {
			continue
		}
		one, _ := json.Marshal(map[string]json.RawMessage{key: obj[key]})
		err := unmarshalOpts.Unmarshal(one, dynamicpb.NewMessage(md))
		if err == nil {
			continue
		}
		fp := join(path, fd.JSONName())
		switch {
		case fd.IsList() && isPlainMessage(fd):
			var elems []json.RawMessage
			if json.Unmarshal(obj[key], &elems) == nil {
				n := len(*vs)
				for i, e := range elems {
					locate(e, fd.Message(), fmt.Sprintf("%s[%d]", fp, i), nil, vs)
				}
				if len(*vs) > n {
					continue
				}
			}
		case !fd.IsList() && !fd.IsMap() && isPlainMessage(fd):
			n := len(*vs)
			locate(obj[key], fd.Message(), fp, nil, vs)
			if len(*vs) > n {
				continue
			}
		}
		*vs = append(*vs, apierr.Violation{Field: fp, Description: describe(fd, err)})
	}
}

func describe(fd protoreflect.FieldDescriptor, err error) string {
	switch {
	case fd.IsMap():
		return "must be a JSON object of string values"
	case fd.IsList():
		return "must be a JSON array of valid elements"
	case fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Timestamp":
		return "must be an RFC 3339 timestamp, e.g. 2030-01-02T15:04:05Z"
	case fd.Kind() == protoreflect.StringKind:
		return "must be a string"
	case fd.Kind() == protoreflect.BoolKind:
		return "must be true or false"
	case fd.Kind() == protoreflect.EnumKind:
		return "must be one of the enum's names"
	}
	return "invalid value: " + cleanErr(err)
}

// cleanErr strips protojson's unstable "(line:col)" decorations and prefix.
func cleanErr(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "proto: ")
	s = strings.TrimPrefix(s, "proto:\u00a0")
	return s
}

func object(raw []byte) (map[string]json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, false
	}
	return obj, true
}

func field(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	if fd := md.Fields().ByJSONName(key); fd != nil {
		return fd
	}
	return md.Fields().ByName(protoreflect.Name(key))
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// isPlainMessage is a message field that JSON encodes as an object of its
// fields (well-known types have special encodings).
func isPlainMessage(fd protoreflect.FieldDescriptor) bool {
	return fd.Message() != nil && !strings.HasPrefix(string(fd.Message().FullName()), "google.protobuf.")
}

func isInt(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

func is64(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orBody(path string) string {
	if path == "" {
		return "body"
	}
	return path
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Marshal encodes m as protojson (camelCase names, default-valued scalars,
// lists and maps included, unset message fields omitted) with 64-bit
// integers as JSON numbers.
func Marshal(m proto.Message) ([]byte, error) {
	opts := marshalOpts
	// Our resources show every field; google.rpc error details read better
	// without empty ones.
	opts.EmitDefaultValues = strings.HasPrefix(string(m.ProtoReflect().Descriptor().FullName()), "paysched.")
	b, err := opts.Marshal(m)
	if err != nil {
		return nil, err
	}
	md := m.ProtoReflect().Descriptor()
	if !has64(md, map[protoreflect.FullName]bool{}) {
		// protojson varies its whitespace on purpose; responses must be
		// byte-stable (a replay returns the original body exactly).
		var out bytes.Buffer
		if err := json.Compact(&out, b); err != nil {
			return nil, fmt.Errorf("jsoncodec: compact: %w", err)
		}
		return out.Bytes(), nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("jsoncodec: re-read protojson: %w", err)
	}
	numbers(v, md)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("jsoncodec: encode: %w", err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// numbers turns the quoted 64-bit integers of v (decoded protojson of md)
// back into JSON numbers.
func numbers(v any, md protoreflect.MessageDescriptor) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	for key, val := range obj {
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			continue
		}
		switch {
		case fd.IsMap():
			vd := fd.MapValue()
			if m, ok := val.(map[string]any); ok {
				for k, e := range m {
					m[k] = fix(e, vd)
				}
			}
		case fd.IsList():
			if l, ok := val.([]any); ok {
				for i, e := range l {
					l[i] = fix(e, fd)
				}
			}
		default:
			obj[key] = fix(val, fd)
		}
	}
}

func fix(v any, fd protoreflect.FieldDescriptor) any {
	if is64(fd.Kind()) {
		if s, ok := v.(string); ok {
			return json.Number(s)
		}
		return v
	}
	if isPlainMessage(fd) {
		numbers(v, fd.Message())
	}
	return v
}

func has64(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		fd := fs.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if is64(fd.Kind()) || (isPlainMessage(fd) && has64(fd.Message(), seen)) {
			return true
		}
	}
	return false
}

// Marshaler is grpc-gateway's marshaler for paysched: Marshal above for
// output, protojson for input (bodies are checked by Unmarshal before the
// gateway decodes them).
type Marshaler struct {
	runtime.JSONPb
}

// NewMarshaler returns the REST marshaler.
func NewMarshaler() *Marshaler {
	return &Marshaler{JSONPb: runtime.JSONPb{MarshalOptions: marshalOpts, UnmarshalOptions: unmarshalOpts}}
}

// Marshal implements runtime.Marshaler.
func (m *Marshaler) Marshal(v any) ([]byte, error) {
	if pm, ok := v.(proto.Message); ok {
		return Marshal(pm)
	}
	return m.JSONPb.Marshal(v)
}

// NewEncoder implements runtime.Marshaler.
func (m *Marshaler) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		b, err := m.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}
