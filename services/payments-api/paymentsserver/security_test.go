package paymentsserver_test

// The security and bad-input suite: every input of the public API at its
// boundaries and beyond, hostile strings in every string field, tampered
// cursors, other actors' payments, bad tokens and request floods, over REST
// and gRPC alike. Two rules hold throughout: nothing answers 5xx (gRPC
// Internal, Unknown, ...), and a rejected request writes no row.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/cursor"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/api/ratelimit"
	"github.com/paysched/paysched/pkg/api/rest"
	"github.com/paysched/paysched/services/payments-api/paymentsserver"
)

type createReq = payschedv1.CreateScheduledPaymentRequest

// ---- helpers ----------------------------------------------------------------

// rows counts what a create writes: payments plus payment_index rows.
func rows(t *testing.T, e *env) int {
	t.Helper()
	var n int
	err := e.db.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM payments) + (SELECT count(*) FROM payment_index)`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// unchanged fails t when the row count moved from before.
func unchanged(t *testing.T, e *env, before int, what string) {
	t.Helper()
	if n := rows(t, e); n != before {
		t.Errorf("%s: a rejected request wrote %d rows", what, n-before)
	}
}

// send performs req; a transport error, any 5xx answer or one that its
// OpenAPI document does not allow fails t.
func send(t *testing.T, req *http.Request) resp {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := resp{code: res.StatusCode, header: res.Header, body: b}
	checkContract(t, req, r.code, r.header, b)
	if r.code >= 500 {
		t.Errorf("%s %s answered %d: %s", req.Method, req.URL.RequestURI(), r.code, b)
	}
	return r
}

// call sends a REST request with a bearer token, JSON content type when
// there is a body, and the given headers.
func call(t *testing.T, e *env, method, path, tok string, hdr map[string]string, body string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return send(t, req)
}

// apiError is the google.rpc.Status of an error body, leniently parsed.
type apiError struct {
	reason string
	fields []string
	retry  string // RetryInfo delay
}

func parseError(body []byte) (apiError, bool) {
	var st struct {
		Details []struct {
			Type            string `json:"@type"`
			Reason          string `json:"reason"`
			RetryDelay      string `json:"retryDelay"`
			FieldViolations []struct {
				Field string `json:"field"`
			} `json:"fieldViolations"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &st) != nil {
		return apiError{}, false
	}
	var out apiError
	for _, d := range st.Details {
		switch d.Type {
		case "type.googleapis.com/google.rpc.ErrorInfo":
			out.reason = d.Reason
		case "type.googleapis.com/google.rpc.RetryInfo":
			out.retry = d.RetryDelay
		case "type.googleapis.com/google.rpc.BadRequest":
			for _, fv := range d.FieldViolations {
				out.fields = append(out.fields, fv.Field)
			}
		}
	}
	return out, true
}

// grpcFields are the BadRequest fields of a gRPC error.
// Over gRPC, BadRequest names proto fields (due_at); the cases name JSON
// fields (dueAt), so a proto name is mapped back for the comparison and
// anything else is marked, which makes it match no case.
func grpcFields(err error) []string {
	var out []string
	for _, v := range apierr.Violations(err) {
		if apierr.ProtoPath(v.Field) != v.Field {
			out = append(out, "not-a-proto-name:"+v.Field)
			continue
		}
		out = append(out, jsonPath(v.Field))
	}
	return out
}

// jsonPath is the JSON name path of a proto name path (due_at: dueAt).
func jsonPath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '_' && i+1 < len(p) && p[i+1] >= 'a' && p[i+1] <= 'z' {
			b.WriteByte(p[i+1] - ('a' - 'A'))
			i++
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// hasField reports whether one of fields is, or is under, one of want
// ("metadata" matches "metadata.k").
func hasField(fields []string, want ...string) bool {
	for _, f := range fields {
		for _, w := range want {
			if f == w || strings.HasPrefix(f, w+".") || strings.HasPrefix(f, w+"[") {
				return true
			}
		}
	}
	return false
}

// notServerError fails t for a gRPC code that means the server broke.
func notServerError(t *testing.T, what string, err error) {
	t.Helper()
	switch status.Code(err) {
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented, codes.Unavailable:
		t.Errorf("%s: gRPC %v", what, err)
	}
}

// jsonString quotes s for JSON but leaves bytes >= 0x80 as they are, so
// invalid UTF-8 reaches the server raw (encoding/json would replace it).
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// restBody is the JSON of a create request, strings written raw.
func restBody(r *createReq) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"payee":%s,"amount":%d`, jsonString(r.GetPayee()), r.GetAmount())
	if r.GetCurrency() != "" {
		fmt.Fprintf(&b, `,"currency":%s`, jsonString(r.GetCurrency()))
	}
	if r.GetDueAt() != nil {
		fmt.Fprintf(&b, `,"dueAt":%q`, r.GetDueAt().AsTime().Format(time.RFC3339Nano))
	}
	if r.GetDescription() != "" {
		fmt.Fprintf(&b, `,"description":%s`, jsonString(r.GetDescription()))
	}
	if r.Metadata != nil {
		keys := make([]string, 0, len(r.Metadata))
		for k := range r.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString(`,"metadata":{`)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(jsonString(k) + ":" + jsonString(r.Metadata[k]))
		}
		b.WriteByte('}')
	}
	if r.GetRequestId() != "" {
		fmt.Fprintf(&b, `,"requestId":%s`, jsonString(r.GetRequestId()))
	}
	b.WriteByte('}')
	return b.String()
}

// rawMsg is a request already encoded as protobuf wire bytes; rawCodec
// sends it as it is, so a test can send what a Go client would refuse to
// marshal (invalid UTF-8 in a string field).
type rawMsg []byte

type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(rawMsg); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// withString appends string field num = s to m's encoding, unchecked.
func withString(m proto.Message, num protowire.Number, s string) rawMsg {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, []byte(s))
}

func invoke(ctx context.Context, e *env, method string, in rawMsg, out proto.Message) error {
	return e.cc.Invoke(ctx, "/paysched.v1.PaymentsService/"+method, in, out, grpc.ForceCodecV2(rawCodec{}))
}

func baseReq() *createReq {
	return &createReq{Payee: "bob", Amount: 100, DueAt: timestamppb.New(time.Now().Add(time.Hour))}
}

// ---- every create field at its boundaries ---------------------------------

type createCase struct {
	name string
	mut  func(*createReq)
	// fields: accepted when empty; otherwise a violation must name one of them.
	fields []string
	// reason of a rejection, VALIDATION_FAILED when empty.
	reason string
	// ownKey: the case sets request_id itself; no header or metadata key is sent.
	ownKey   bool
	grpcOnly bool
}

func metadataOf(n, klen, vlen int, unit string) map[string]string {
	m := map[string]string{}
	for i := range n {
		k := fmt.Sprintf("%03d", i) + strings.Repeat(unit, klen-3)
		m[k] = strings.Repeat(unit, vlen)
	}
	return m
}

func createCases() []createCase {
	const cap = 1_000_000 // testConfig's amount cap
	x := func(n int) string { return strings.Repeat("x", n) }
	emoji := func(n int) string { return strings.Repeat("💸", n) }
	combining := func(pairs int) string { return strings.Repeat("e\u0301", pairs) }
	due := func(d time.Duration) func(*createReq) {
		return func(r *createReq) { r.DueAt = timestamppb.New(time.Now().Add(d)) }
	}
	payee := func(s string) func(*createReq) { return func(r *createReq) { r.Payee = s } }
	amount := func(a int64) func(*createReq) { return func(r *createReq) { r.Amount = a } }
	currency := func(s string) func(*createReq) { return func(r *createReq) { r.Currency = s } }
	desc := func(s string) func(*createReq) { return func(r *createReq) { r.Description = s } }
	meta := func(m map[string]string) func(*createReq) { return func(r *createReq) { r.Metadata = m } }
	key := func(s string) func(*createReq) { return func(r *createReq) { r.RequestId = s } }
	year := 365 * 24 * time.Hour
	return []createCase{
		// payee: 1..128 characters (runes, not bytes), no control characters.
		{name: "payee min-1 (empty)", mut: payee(""), fields: []string{"payee"}},
		{name: "payee blank", mut: payee(" \t\u3000 "), fields: []string{"payee"}},
		{name: "payee min (1)", mut: payee("b")},
		{name: "payee max (128)", mut: payee(x(128))},
		{name: "payee max+1 (129)", mut: payee(x(129)), fields: []string{"payee"}},
		{name: "payee 128 emoji (512 bytes)", mut: payee(emoji(128))},
		{name: "payee 129 emoji", mut: payee(emoji(129)), fields: []string{"payee"}},
		{name: "payee 128 runes of combining pairs", mut: payee(combining(64))},
		{name: "payee 130 runes of combining pairs", mut: payee(combining(65)), fields: []string{"payee"}},
		{name: "payee NUL", mut: payee("bo\x00b"), fields: []string{"payee"}},
		{name: "payee newline", mut: payee("bo\nb"), fields: []string{"payee"}},
		// amount: 1..cap minor units.
		{name: "amount min-1 (0)", mut: amount(0), fields: []string{"amount"}},
		{name: "amount min (1)", mut: amount(1)},
		{name: "amount -1", mut: amount(-1), fields: []string{"amount"}},
		{name: "amount max (cap)", mut: amount(cap)},
		{name: "amount max+1", mut: amount(cap + 1), fields: []string{"amount"}},
		{name: "amount MaxInt64", mut: amount(math.MaxInt64), fields: []string{"amount"}},
		{name: "amount MinInt64", mut: amount(math.MinInt64), fields: []string{"amount"}},
		// currency: an upper-case ISO 4217 code, or empty for the default.
		{name: "currency default", mut: currency("")},
		{name: "currency USD", mut: currency("USD")},
		{name: "currency lower case", mut: currency("usd"), fields: []string{"currency"}},
		{name: "currency 2 letters", mut: currency("US"), fields: []string{"currency"}},
		{name: "currency 4 letters", mut: currency("USDD"), fields: []string{"currency"}},
		{name: "currency unknown", mut: currency("ZZZ"), fields: []string{"currency"}},
		{name: "currency padded", mut: currency(" USD"), fields: []string{"currency"}},
		{name: "currency NUL", mut: currency("U\x00D"), fields: []string{"currency"}},
		{name: "currency homoglyph", mut: currency("UЅD"), fields: []string{"currency"}},
		// dueAt: strictly future, at most the horizon (365 days) ahead.
		{name: "dueAt missing", mut: func(r *createReq) { r.DueAt = nil }, fields: []string{"dueAt"}},
		{name: "dueAt past", mut: due(-time.Hour), fields: []string{"dueAt"}},
		{name: "dueAt a second ago", mut: due(-time.Second), fields: []string{"dueAt"}},
		{name: "dueAt soon (min)", mut: due(5 * time.Second)},
		{name: "dueAt horizon-1m (max)", mut: due(year - time.Minute)},
		{name: "dueAt horizon+1m", mut: due(year + time.Minute), fields: []string{"dueAt"}},
		{name: "dueAt year 9999", mut: func(r *createReq) {
			r.DueAt = timestamppb.New(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC))
		}, fields: []string{"dueAt"}},
		{name: "dueAt epoch", mut: func(r *createReq) { r.DueAt = &timestamppb.Timestamp{} }, fields: []string{"dueAt"}},
		{name: "dueAt seconds out of range", grpcOnly: true, mut: func(r *createReq) {
			r.DueAt = &timestamppb.Timestamp{Seconds: 253402300800}
		}, fields: []string{"dueAt"}},
		{name: "dueAt seconds MinInt64", grpcOnly: true, mut: func(r *createReq) {
			r.DueAt = &timestamppb.Timestamp{Seconds: math.MinInt64}
		}, fields: []string{"dueAt"}},
		{name: "dueAt negative nanos", grpcOnly: true, mut: func(r *createReq) {
			r.DueAt = &timestamppb.Timestamp{Seconds: time.Now().Add(time.Hour).Unix(), Nanos: -1}
		}, fields: []string{"dueAt"}},
		{name: "dueAt nanos 1e9", grpcOnly: true, mut: func(r *createReq) {
			r.DueAt = &timestamppb.Timestamp{Seconds: time.Now().Add(time.Hour).Unix(), Nanos: 1e9}
		}, fields: []string{"dueAt"}},
		// description: at most 500 characters; newlines and tabs allowed.
		{name: "description max (500)", mut: desc(x(500))},
		{name: "description max+1 (501)", mut: desc(x(501)), fields: []string{"description"}},
		{name: "description 500 emoji", mut: desc(emoji(500))},
		{name: "description 501 emoji", mut: desc(emoji(501)), fields: []string{"description"}},
		{name: "description multiline", mut: desc("line 1\r\nline\t2\n")},
		{name: "description NUL", mut: desc("a\x00"), fields: []string{"description"}},
		{name: "description ESC", mut: desc("a\x1b[31m"), fields: []string{"description"}},
		{name: "description DEL", mut: desc("a\x7f"), fields: []string{"description"}},
		{name: "description C1 control", mut: desc("a\u0085"), fields: []string{"description"}},
		// metadata: at most 20 keys of 1..40 characters, values up to 500.
		{name: "metadata max keys (20)", mut: meta(metadataOf(20, 3, 1, "v"))},
		{name: "metadata max+1 keys (21)", mut: meta(metadataOf(21, 3, 1, "v")), fields: []string{"metadata"}},
		{name: "metadata key max (40)", mut: meta(metadataOf(1, 40, 1, "k"))},
		{name: "metadata key max+1 (41)", mut: meta(metadataOf(1, 41, 1, "k")), fields: []string{"metadata"}},
		{name: "metadata key 40 emoji", mut: meta(map[string]string{emoji(40): "v"})},
		{name: "metadata key 41 emoji", mut: meta(map[string]string{emoji(41): "v"}), fields: []string{"metadata"}},
		{name: "metadata key empty", mut: meta(map[string]string{"": "v"}), fields: []string{"metadata"}},
		{name: "metadata key newline", mut: meta(map[string]string{"a\nb": "v"}), fields: []string{"metadata"}},
		{name: "metadata key NUL", mut: meta(map[string]string{"a\x00": "v"}), fields: []string{"metadata"}},
		{name: "metadata value max (500)", mut: meta(map[string]string{"k": x(500)})},
		{name: "metadata value max+1 (501)", mut: meta(map[string]string{"k": x(501)}), fields: []string{"metadata"}},
		{name: "metadata value 500 emoji", mut: meta(map[string]string{"k": emoji(500)})},
		{name: "metadata value empty", mut: meta(map[string]string{"k": ""})},
		{name: "metadata value multiline", mut: meta(map[string]string{"k": "a\nb"})},
		{name: "metadata value NUL", mut: meta(map[string]string{"k": "\x00"}), fields: []string{"metadata"}},
		{name: "metadata 20 max keys with max values", mut: meta(metadataOf(20, 40, 500, "m"))},
		// the idempotency key (request_id; the header is covered below): 1..255
		// printable ASCII bytes without spaces.
		{name: "key missing", ownKey: true, mut: key(""), reason: apierr.ReasonIdempotencyRequired},
		{name: "key min (1)", ownKey: true, mut: key("k")},
		{name: "key max (255)", ownKey: true, mut: key(x(255))},
		{name: "key max+1 (256)", ownKey: true, mut: key(x(256)), fields: []string{"idempotencyKey"}},
		{name: "key with space", ownKey: true, mut: key("a b"), fields: []string{"idempotencyKey"}},
		{name: "key with tab", ownKey: true, mut: key("a\tb"), fields: []string{"idempotencyKey"}},
		{name: "key DEL", ownKey: true, mut: key("a\x7f"), fields: []string{"idempotencyKey"}},
		{name: "key NUL", ownKey: true, mut: key("a\x00"), fields: []string{"idempotencyKey"}},
		{name: "key non-ASCII", ownKey: true, mut: key("ключ"), fields: []string{"idempotencyKey"}},
		{name: "key SQL without spaces", ownKey: true, mut: key(`';DROP_TABLE_payments;--%_\`)},
	}
}

// TestCreateFieldBoundaries sends every case over REST and gRPC (as
// different actors, so their keys do not meet): accepted ones answer the
// request's values and write one payment; rejected ones name the field and
// write nothing.
func TestCreateFieldBoundaries(t *testing.T) {
	e := start(t)
	restTok, grpcTok := token(t, "boundary-rest"), token(t, "boundary-grpc")
	for i, tc := range createCases() {
		t.Run(tc.name, func(t *testing.T) {
			check := func(t *testing.T, before int, accepted bool, got *payschedv1.ScheduledPayment, want *createReq, reason string, fields []string) {
				t.Helper()
				if len(tc.fields) == 0 && tc.reason == "" {
					if !accepted {
						t.Fatalf("rejected (%s %v), want accepted", reason, fields)
					}
					if n := rows(t, e); n != before+2 {
						t.Errorf("accepted create wrote %d rows, want 2", n-before)
					}
					wantCur := want.GetCurrency()
					if wantCur == "" {
						wantCur = "EUR"
					}
					if got.GetPayee() != want.GetPayee() || got.GetAmount() != want.GetAmount() || got.GetCurrency() != wantCur ||
						got.GetDescription() != want.GetDescription() || len(got.GetMetadata()) != len(want.GetMetadata()) {
						t.Errorf("answer %v differs from the request %v", got, want)
					}
					for k, v := range want.GetMetadata() {
						if got.GetMetadata()[k] != v {
							t.Errorf("metadata[%q] = %q, want %q", k, got.GetMetadata()[k], v)
						}
					}
					return
				}
				if accepted {
					t.Fatalf("accepted, want rejected with %v %s", tc.fields, tc.reason)
				}
				unchanged(t, e, before, tc.name)
				wantReason := tc.reason
				if wantReason == "" {
					wantReason = apierr.ReasonValidation
				}
				if reason != wantReason {
					t.Errorf("reason %q, want %q", reason, wantReason)
				}
				if len(tc.fields) > 0 && !hasField(fields, tc.fields...) {
					t.Errorf("violations %v do not name %v", fields, tc.fields)
				}
			}

			if !tc.grpcOnly {
				t.Run("rest", func(t *testing.T) {
					req := baseReq()
					tc.mut(req)
					hdr := map[string]string{}
					if !tc.ownKey {
						hdr["Idempotency-Key"] = fmt.Sprint("case-", i)
					}
					before := rows(t, e)
					r := call(t, e, "POST", create, restTok, hdr, restBody(req))
					var got payschedv1.ScheduledPayment
					accepted := r.code == http.StatusCreated
					if accepted {
						if err := protojson.Unmarshal(r.body, &got); err != nil {
							t.Fatalf("201 body: %v: %s", err, r.body)
						}
					} else if r.code != http.StatusBadRequest {
						t.Fatalf("%d %s, want 201 or 400", r.code, r.body)
					}
					pe, _ := parseError(r.body)
					check(t, before, accepted, &got, req, pe.reason, pe.fields)
				})
			}
			t.Run("grpc", func(t *testing.T) {
				req := baseReq()
				tc.mut(req)
				ctx := authed(grpcTok)
				if !tc.ownKey {
					ctx = authed(grpcTok, "idempotency-key", fmt.Sprint("case-", i))
				}
				before := rows(t, e)
				var out payschedv1.CreateScheduledPaymentResponse
				err := invoke(ctx, e, "CreateScheduledPayment", rawReq(req), &out)
				notServerError(t, tc.name, err)
				if err != nil && status.Code(err) != codes.InvalidArgument {
					t.Fatalf("%v, want OK or InvalidArgument", err)
				}
				check(t, before, err == nil, out.GetPayment(), req, apierr.Reason(err), grpcFields(err))
			})
		})
	}
}

// rawReq encodes a create request whose strings may not be valid UTF-8,
// which proto.Marshal refuses: each string field is appended unchecked.
func rawReq(r *createReq) rawMsg {
	rest := &createReq{Amount: r.GetAmount(), DueAt: r.GetDueAt()}
	b, err := proto.Marshal(rest)
	if err != nil {
		panic(err)
	}
	str := func(num protowire.Number, s string) {
		if s != "" {
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendBytes(b, []byte(s))
		}
	}
	str(1, r.GetPayee())
	str(3, r.GetCurrency())
	str(5, r.GetDescription())
	for k, v := range r.GetMetadata() {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendBytes(entry, []byte(k))
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendBytes(entry, []byte(v))
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	str(7, r.GetRequestId())
	return b
}

// TestCreateMalformedJSON: REST bodies that are not a well-typed create
// request are 400 and write nothing.
func TestCreateMalformedJSON(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	due := future(time.Hour)
	with := func(field, raw string) string {
		m := map[string]string{"payee": `"bob"`, "amount": "1", "dueAt": strconv.Quote(due)}
		m[field] = raw
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var kv []string
		for _, k := range keys {
			kv = append(kv, strconv.Quote(k)+":"+m[k])
		}
		return "{" + strings.Join(kv, ",") + "}"
	}
	cases := []struct {
		name, body string
		field      string // "" = any 400
	}{
		{"amount float", with("amount", "1.0"), "amount"},
		{"amount exponent", with("amount", "1e2"), "amount"},
		{"amount quoted", with("amount", `"1"`), "amount"},
		{"amount bool", with("amount", "true"), "amount"},
		{"amount null", with("amount", "null"), "amount"},
		{"amount array", with("amount", "[1]"), "amount"},
		{"amount object", with("amount", `{"v":1}`), "amount"},
		{"amount leading zero", with("amount", "01"), ""},
		{"amount 2^63", with("amount", "9223372036854775808"), "amount"},
		{"amount -2^63-1", with("amount", "-9223372036854775809"), "amount"},
		{"amount hex", with("amount", "0x10"), ""},
		{"amount NaN", with("amount", "NaN"), ""},
		{"payee number", with("payee", "1"), "payee"},
		{"payee null", with("payee", "null"), "payee"},
		{"payee array", with("payee", `["bob"]`), "payee"},
		{"payee object", with("payee", `{"a":"b"}`), "payee"},
		{"payee lone surrogate", with("payee", `"\ud800"`), "payee"},
		{"payee bad escape", with("payee", `"\x41"`), ""},
		{"payee invalid UTF-8", with("payee", "\"\xff\xfe\""), "payee"},
		{"payee overlong UTF-8", with("payee", "\"\xc0\xaf\""), "payee"},
		{"payee UTF-8 surrogate", with("payee", "\"\xed\xa0\x80\""), "payee"},
		{"payee escaped replacement char", with("payee", `"\ufffd"`), "payee"},
		{"currency number", with("currency", "840"), "currency"},
		{"dueAt empty", with("dueAt", `""`), "dueAt"},
		{"dueAt null", with("dueAt", "null"), "dueAt"},
		{"dueAt number", with("dueAt", "1893456000"), "dueAt"},
		{"dueAt date only", with("dueAt", `"2030-01-01"`), "dueAt"},
		{"dueAt without zone", with("dueAt", `"2030-01-01T00:00:00"`), "dueAt"},
		{"dueAt space separator", with("dueAt", `"2030-01-01 00:00:00Z"`), "dueAt"},
		{"dueAt February 30", with("dueAt", `"2030-02-30T00:00:00Z"`), "dueAt"},
		{"dueAt leap second", with("dueAt", `"2030-06-30T23:59:60Z"`), "dueAt"},
		{"dueAt year 10000", with("dueAt", `"10000-01-01T00:00:00Z"`), "dueAt"},
		{"dueAt year 0", with("dueAt", `"0000-01-01T00:00:00Z"`), "dueAt"},
		{"dueAt offset +25:00", with("dueAt", `"2030-01-01T00:00:00+25:00"`), "dueAt"},
		{"dueAt SQL", with("dueAt", `"now()'; DROP TABLE payments;--"`), "dueAt"},
		{"description number", with("description", "1"), "description"},
		{"metadata array", with("metadata", `["a"]`), "metadata"},
		{"metadata string", with("metadata", `"a=b"`), "metadata"},
		{"metadata number value", with("metadata", `{"k":1}`), "metadata"},
		{"metadata nested", with("metadata", `{"k":{"n":"v"}}`), "metadata"},
		{"metadata list value", with("metadata", `{"k":["v"]}`), "metadata"},
		{"metadata invalid UTF-8 key", with("metadata", "{\"\xff\":\"v\"}"), "metadata"},
		{"metadata invalid UTF-8 value", with("metadata", "{\"k\":\"\xff\"}"), "metadata"},
		{"metadata deep nesting", with("metadata", strings.Repeat(`{"a":`, 5000)+`"v"`+strings.Repeat("}", 5000)), "metadata"},
		{"requestId number", with("requestId", "7"), "requestId"},
		{"unknown field payer", with("payer", `"mallory"`), "payer"},
		{"unknown field paymentId", with("paymentId", `"00000000-0000-0000-0000-000000000001"`), "paymentId"},
		{"unknown field status", with("status", `"COMPLETED"`), "status"},
		{"unknown field attempt", with("attempt", "9"), "attempt"},
		{"unknown field __proto__", with("__proto__", `{"admin":true}`), "__proto__"},
		{"field name in other case", with("PAYEE", `"eve"`), "PAYEE"},
		{"duplicate field", `{"payee":"bob","payee":"eve","amount":1,"dueAt":"` + due + `"}`, ""},
		{"trailing garbage", with("payee", `"bob"`) + "x", "body"},
		{"two objects", with("payee", `"bob"`) + with("payee", `"eve"`), "body"},
		{"byte order mark", "\ufeff" + with("payee", `"bob"`), "body"},
		{"top-level null", "null", "body"},
		{"top-level string", `"x"`, "body"},
		{"top-level number", "1", "body"},
		{"top-level array", "[]", "body"},
		{"deep arrays", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), "body"},
		{"only whitespace", "   \n", "body"},
		{"NUL bytes", "\x00\x00\x00", "body"},
	}
	before := rows(t, e)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, e, "POST", create, alice, key(fmt.Sprint("m", i)), c.body)
			pe, ok := parseError(r.body)
			if r.code != http.StatusBadRequest || !ok || pe.reason != apierr.ReasonValidation {
				t.Fatalf("%d %s, want 400 VALIDATION_FAILED", r.code, r.body)
			}
			if c.field != "" && !hasField(pe.fields, c.field) {
				t.Errorf("violations %v do not name %q", pe.fields, c.field)
			}
			unchanged(t, e, before, c.name)
		})
	}
}

// ---- hostile strings in every string field ----------------------------------

type payload struct {
	name, s string
	// text: valid in a single-line text field (payee, metadata key);
	// multiline: valid in description and metadata values; key: valid as
	// an idempotency key (printable ASCII, no space).
	text, multiline, key bool
}

var payloads = []payload{
	{name: "sql drop", s: "'; DROP TABLE payments;--", text: true, multiline: true},
	{name: "sql quotes", s: `O'Brien "x" \' \\ ''`, text: true, multiline: true},
	{name: "sql comment", s: "x/**/OR/**/1=1--", text: true, multiline: true, key: true},
	{name: "like wildcards", s: "%_%", text: true, multiline: true, key: true},
	{name: "backslashes", s: `\\server\share\`, text: true, multiline: true, key: true},
	{name: "json injection", s: `","amount":999999,"x":"`, text: true, multiline: true, key: true},
	{name: "html", s: "<script>alert(1)</script>", text: true, multiline: true, key: true},
	{name: "NUL", s: "a\x00b"},
	{name: "ESC", s: "a\x1bb"},
	{name: "DEL", s: "a\x7fb"},
	{name: "newline", s: "a\nb", multiline: true},
	{name: "C1 control", s: "a\u0085b"},
	// Display strings refuse what spoofs an operator's screen: bidi
	// overrides and isolates, zero-width characters (and so ZWJ emoji).
	{name: "RTL override", s: "invoice\u202Efdp.exe"},
	{name: "bidi isolate", s: "a\u2067b\u2069"},
	{name: "RLM", s: "bob\u200F"},
	{name: "zero-width joiners", s: "a\u200Bb\u200Cc\u200Dd\u2060e"},
	{name: "ZWJ emoji", s: "👩‍👩‍👧‍👦🏳️‍🌈"},
	{name: "emoji", s: "💸🏦", text: true, multiline: true},
	{name: "combining marks", s: "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d", text: true, multiline: true},
	{name: "byte order mark", s: "\uFEFFbob"},
	// A line break that shows none: refused (Unicode Zl, Zp).
	{name: "line separators", s: "a\u2028b\u2029c"},
	{name: "soft hyphen and invisible operators", s: "bo\u00ADb\u2062"},
	{name: "tag characters", s: "bob\U000E0041\U000E007F"},
	{name: "noncharacters", s: "\uFFFE\uFFFF\U0010FFFF", text: true, multiline: true},
	{name: "replacement char", s: "\uFFFD"},
	{name: "invalid UTF-8", s: "a\xff\xfeb"},
	{name: "overlong UTF-8", s: "\xc0\xaf"},
	{name: "UTF-8 surrogate", s: "\xed\xa0\x80"},
	{name: "truncated UTF-8", s: "ab\xe2\x82"},
}

// stringField is one string input of a create.
type stringField struct {
	name  string
	set   func(*createReq, string)
	ok    func(payload) bool
	field []string // violation field(s) when rejected
}

var stringFields = []stringField{
	{"payee", func(r *createReq, s string) { r.Payee = s }, func(p payload) bool { return p.text }, []string{"payee"}},
	{"description", func(r *createReq, s string) { r.Description = s }, func(p payload) bool { return p.multiline }, []string{"description"}},
	{"metadata key", func(r *createReq, s string) { r.Metadata = map[string]string{s: "v"} }, func(p payload) bool { return p.text }, []string{"metadata"}},
	{"metadata value", func(r *createReq, s string) { r.Metadata = map[string]string{"k": s} }, func(p payload) bool { return p.multiline }, []string{"metadata"}},
	{"currency", func(r *createReq, s string) { r.Currency = s }, func(payload) bool { return false }, []string{"currency"}},
	{"requestId", func(r *createReq, s string) { r.RequestId = s }, func(p payload) bool { return p.key }, []string{"requestId", "idempotencyKey"}},
}

// TestHostileStrings puts every payload in every string field of create,
// over REST and gRPC. What is accepted is stored and read back byte for
// byte (GET over both transports); what is not is a 400 naming the field
// and writes nothing.
func TestHostileStrings(t *testing.T) {
	e := start(t)
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	restTok, grpcTok := token(t, "hostile-rest"), token(t, "hostile-grpc")
	n := 0
	for _, f := range stringFields {
		for _, p := range payloads {
			n++
			k := fmt.Sprint("h", n)
			t.Run(f.name+"/"+p.name, func(t *testing.T) {
				req := baseReq()
				f.set(req, p.s)
				readBack := func(t *testing.T, id string, tok string) {
					t.Helper()
					g, err := c.GetScheduledPayment(authed(tok), &payschedv1.GetScheduledPaymentRequest{PaymentId: id})
					if err != nil {
						t.Fatalf("gRPC get: %v", err)
					}
					r := call(t, e, "GET", create+"/"+id, tok, nil, "")
					var rest struct {
						Payee, Description string
						Metadata           map[string]string
					}
					if err := json.Unmarshal(r.body, &rest); err != nil || r.code != http.StatusOK {
						t.Fatalf("REST get: %d %s", r.code, r.body)
					}
					gp := g.GetPayment()
					for _, pair := range [][2]string{
						{gp.GetPayee(), req.GetPayee()}, {rest.Payee, req.GetPayee()},
						{gp.GetDescription(), req.GetDescription()}, {rest.Description, req.GetDescription()},
					} {
						if pair[0] != pair[1] {
							t.Errorf("read back %q, stored %q", pair[0], pair[1])
						}
					}
					for mk, mv := range req.GetMetadata() {
						if gp.GetMetadata()[mk] != mv || rest.Metadata[mk] != mv {
							t.Errorf("metadata read back %v / %v, stored %q: %q", gp.GetMetadata(), rest.Metadata, mk, mv)
						}
					}
				}
				t.Run("rest", func(t *testing.T) {
					hdr := map[string]string{}
					if f.name != "requestId" {
						hdr["Idempotency-Key"] = k
					}
					before := rows(t, e)
					r := call(t, e, "POST", create, restTok, hdr, restBody(req))
					if f.ok(p) {
						if r.code != http.StatusCreated {
							t.Fatalf("%d %s, want 201", r.code, r.body)
						}
						var out struct{ PaymentID string }
						_ = json.Unmarshal(r.body, &out)
						readBack(t, out.PaymentID, restTok)
						return
					}
					pe, _ := parseError(r.body)
					if r.code != http.StatusBadRequest || !hasField(pe.fields, f.field...) {
						t.Fatalf("%d %s, want 400 naming %v", r.code, r.body, f.field)
					}
					unchanged(t, e, before, "rest")
				})
				t.Run("grpc", func(t *testing.T) {
					ctx := authed(grpcTok)
					if f.name != "requestId" {
						ctx = authed(grpcTok, "idempotency-key", k)
					}
					before := rows(t, e)
					var out payschedv1.CreateScheduledPaymentResponse
					err := invoke(ctx, e, "CreateScheduledPayment", rawReq(req), &out)
					notServerError(t, "create", err)
					if f.ok(p) {
						if err != nil {
							t.Fatalf("%v, want OK", err)
						}
						readBack(t, out.GetPayment().GetPaymentId(), grpcTok)
						return
					}
					if status.Code(err) != codes.InvalidArgument || !hasField(grpcFields(err), f.field...) {
						t.Fatalf("%v %v, want InvalidArgument naming %v", err, grpcFields(err), f.field)
					}
					unchanged(t, e, before, "grpc")
				})
			})
		}
	}
	// Keys that differ only in LIKE wildcards or escapes are different keys.
	tok := token(t, "wildcards")
	for _, k := range []string{"k_1", "kx1", "k%", "kxx", `k\1`, `k\\1`} {
		if r := call(t, e, "POST", create, tok, key(k), body("bob", 1, future(time.Hour))); r.code != http.StatusCreated ||
			r.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("key %q: %d %s (replayed %q), want a new payment", k, r.code, r.body, r.header.Get("Idempotent-Replayed"))
		}
	}
	var tables int
	if err := e.db.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE tablename IN ('payments', 'payment_index')`).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("tables: %d %v", tables, err)
	}
}

// TestHostileIdempotencyKeyHeader sends payloads in the Idempotency-Key
// header (REST) and the idempotency-key metadata (gRPC), as far as each
// client lets them through; NUL and other control bytes go over a raw
// connection.
func TestHostileIdempotencyKeyHeader(t *testing.T) {
	e := start(t)
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	alice := token(t, "alice")
	for i, p := range payloads {
		t.Run(p.name, func(t *testing.T) {
			before := rows(t, e)
			b := body("bob", int64(1+i), future(time.Hour))
			if strings.ContainsFunc(p.s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				// net/http refuses to send these; write the request by hand.
				r := rawHTTP(t, e, "POST "+create+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+alice+
					"\r\nContent-Type: application/json\r\nIdempotency-Key: "+p.s+"\r\nContent-Length: "+
					strconv.Itoa(len(b))+"\r\nConnection: close\r\n\r\n"+b)
				if r.code != http.StatusBadRequest {
					t.Fatalf("raw: %d %s, want 400", r.code, r.body)
				}
				unchanged(t, e, before, "raw")
				return
			}
			r := call(t, e, "POST", create, alice, key(p.s), b)
			pe, _ := parseError(r.body)
			switch {
			case p.key:
				if r.code != http.StatusCreated {
					t.Fatalf("%d %s, want 201", r.code, r.body)
				}
			case strings.ContainsFunc(p.s, func(r rune) bool { return r > 0x7e }):
				// The gateway drops header values that are not valid gRPC
				// metadata (printable ASCII), so the key is missing.
				if r.code != http.StatusBadRequest || pe.reason != apierr.ReasonIdempotencyRequired {
					t.Fatalf("%d %s, want 400 IDEMPOTENCY_KEY_REQUIRED", r.code, r.body)
				}
			default:
				if r.code != http.StatusBadRequest || !hasField(pe.fields, "idempotencyKey") {
					t.Fatalf("%d %s, want 400 naming idempotencyKey", r.code, r.body)
				}
			}
			if !p.key {
				unchanged(t, e, before, "rest")
			}
			// gRPC metadata must be printable ASCII: the client refuses the rest.
			if strings.ContainsFunc(p.s, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
				return
			}
			before = rows(t, e)
			req := baseReq()
			req.Amount = int64(1 + i)
			_, err := c.CreateScheduledPayment(authed(token(t, "alice-grpc"), "idempotency-key", p.s), req)
			notServerError(t, "grpc", err)
			if p.key != (err == nil) {
				t.Fatalf("gRPC: %v, want accepted=%v", err, p.key)
			}
			if err != nil {
				unchanged(t, e, before, "grpc")
			}
		})
	}
}

// rawHTTP writes a request by hand and reads the answer.
func rawHTTP(t *testing.T, e *env, raw string) resp {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 500 {
		t.Errorf("raw request answered %d: %s", res.StatusCode, b)
	}
	return resp{code: res.StatusCode, header: res.Header, body: b}
}

// TestHostileIDsAndQueryParameters: payloads as the payment id of get and
// cancel and as the status, cursor and pageSize of list, over REST and
// gRPC. The answer is 400 (or 404 for a path the router does not know),
// never 5xx.
func TestHostileIDsAndQueryParameters(t *testing.T) {
	e := start(t)
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	alice := token(t, "alice")
	call(t, e, "POST", create, alice, key("k"), body("bob", 1, future(time.Hour)))
	before := rows(t, e)
	all := slices.Clone(payloads)
	for i, s := range []string{"", "1 OR 1=1", "00000000-0000-0000-0000-000000000000' OR '1'='1", "../../etc/passwd",
		"%00", "%2F", strings.Repeat("A", 10_000), "PENDING", "pending", "1", "99", "-1", "2147483648"} {
		all = append(all, payload{name: fmt.Sprint("extra ", i), s: s})
	}
	for _, p := range all {
		s := p.s
		t.Run(p.name, func(t *testing.T) {
			for _, m := range []string{"GET", "DELETE"} {
				r := call(t, e, m, create+"/"+url.PathEscape(s), alice, nil, "")
				if s == "" { // the collection itself
					continue
				}
				if r.code != http.StatusBadRequest && r.code != http.StatusNotFound {
					t.Errorf("%s id %q: %d %s", m, s, r.code, r.body)
				}
			}
			for _, q := range []string{"status", "cursor", "pageSize"} {
				r := call(t, e, "GET", create+"?"+q+"="+url.QueryEscape(s), alice, nil, "")
				if r.code != http.StatusBadRequest && r.code != http.StatusOK {
					t.Errorf("%s=%q: %d %s", q, s, r.code, r.body)
				}
				if q == "cursor" && s != "" && r.code != http.StatusBadRequest {
					t.Errorf("cursor %q: %d, want 400", s, r.code)
				}
			}
			var out payschedv1.GetScheduledPaymentResponse
			err := invoke(authed(alice), e, "GetScheduledPayment", withString(&payschedv1.GetScheduledPaymentRequest{}, 1, s), &out)
			notServerError(t, "gRPC get", err)
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Errorf("gRPC get %q: %v, want InvalidArgument", s, err)
			}
			err = invoke(authed(alice), e, "CancelScheduledPayment", withString(&payschedv1.CancelScheduledPaymentRequest{}, 1, s), &payschedv1.CancelScheduledPaymentResponse{})
			notServerError(t, "gRPC cancel", err)
			if s != "" {
				var lo payschedv1.ListScheduledPaymentsResponse
				err = invoke(authed(alice), e, "ListScheduledPayments", withString(&payschedv1.ListScheduledPaymentsRequest{}, 2, s), &lo)
				notServerError(t, "gRPC list", err)
				if status.Code(err) != codes.InvalidArgument || apierr.Reason(err) != apierr.ReasonInvalidCursor {
					t.Errorf("gRPC cursor %q: %v, want INVALID_CURSOR", s, err)
				}
			}
		})
	}
	_, err := c.ListScheduledPayments(authed(alice), &payschedv1.ListScheduledPaymentsRequest{Status: 99})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("gRPC status 99: %v", err)
	}
	unchanged(t, e, before, "ids and query parameters")
}

// ---- bodies, content types, sizes ---------------------------------------------

func TestBodySizesAndContentTypes(t *testing.T) {
	e := start(t)
	alice := token(t, "alice")
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	padded := func(body string, size int) string { // JSON whitespace up to size bytes
		return body[:len(body)-1] + strings.Repeat(" ", size-len(body)) + "}"
	}
	before := rows(t, e)
	one := body("bob", 1, future(time.Hour))
	for _, c := range []struct {
		name, path, body string
		code             int
		reason           string
	}{
		{"create at the limit", create, padded(one, rest.MaxCreateBody), http.StatusCreated, ""},
		{"create limit+1", create, padded(one, rest.MaxCreateBody+1), http.StatusRequestEntityTooLarge, apierr.ReasonBodyTooLarge},
		{"create 10 MiB", create, padded(one, 10<<20), http.StatusRequestEntityTooLarge, apierr.ReasonBodyTooLarge},
		{"batch limit+1", create + ":batchCreate", padded(`{"items":[]}`, rest.MaxBatchBody+1), http.StatusRequestEntityTooLarge, apierr.ReasonBodyTooLarge},
		{"batch at the limit, no items", create + ":batchCreate", padded(`{"items":[]}`, rest.MaxBatchBody), http.StatusBadRequest, apierr.ReasonValidation},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := rows(t, e)
			r := call(t, e, "POST", c.path, alice, key(strings.ReplaceAll(c.name, " ", "-")), c.body)
			if r.code != c.code {
				t.Fatalf("%d %.300s, want %d", r.code, r.body, c.code)
			}
			if c.reason != "" {
				if pe, _ := parseError(r.body); pe.reason != c.reason {
					t.Errorf("reason %q, want %q", pe.reason, c.reason)
				}
				unchanged(t, e, n, c.name)
			}
		})
	}
	before += 2 // the create at the limit
	// A body that streams past the limit without a Content-Length.
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, `{"payee":"`)
		chunk := strings.Repeat("x", 32<<10)
		for range 64 {
			if _, err := io.WriteString(pw, chunk); err != nil {
				return
			}
		}
		_ = pw.Close()
	}()
	req, _ := http.NewRequest("POST", e.base+create, pr)
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "chunked")
	if r := send(t, req); r.code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked oversize: %d %s", r.code, r.body)
	}
	_ = pr.Close()

	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
		"application/xml", "application/jsonx", "json", ";;;", "application/json; charset=\"", "text/json\x01"} {
		t.Run("content type "+ct, func(t *testing.T) {
			if strings.ContainsRune(ct, 1) {
				r := rawHTTP(t, e, "POST "+create+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+alice+
					"\r\nContent-Type: "+ct+"\r\nIdempotency-Key: ct\r\nContent-Length: "+strconv.Itoa(len(one))+
					"\r\nConnection: close\r\n\r\n"+one)
				if r.code != http.StatusBadRequest && r.code != http.StatusUnsupportedMediaType {
					t.Fatalf("%d %s", r.code, r.body)
				}
				return
			}
			r := call(t, e, "POST", create, alice, map[string]string{"Content-Type": ct, "Idempotency-Key": "ct"}, one)
			if r.code != http.StatusUnsupportedMediaType {
				t.Fatalf("%d %s, want 415", r.code, r.body)
			}
			r = call(t, e, "POST", create+":batchCreate", alice, map[string]string{"Content-Type": ct}, `{"items":[]}`)
			if r.code != http.StatusUnsupportedMediaType {
				t.Fatalf("batch: %d %s, want 415", r.code, r.body)
			}
		})
	}
	unchanged(t, e, before, "content types")
	for i, ct := range []string{"application/json; charset=utf-8", "APPLICATION/JSON", "application/merge-patch+json"} {
		r := call(t, e, "POST", create, alice, map[string]string{"Content-Type": ct, "Idempotency-Key": fmt.Sprint("ok-ct-", i)},
			body("bob", int64(10+i), future(time.Hour)))
		if r.code != http.StatusCreated {
			t.Errorf("content type %q: %d %s, want 201", ct, r.code, r.body)
		}
	}
	before = rows(t, e)
	// A gzip body the server does not decode is just bad JSON.
	r := call(t, e, "POST", create, alice, map[string]string{"Content-Encoding": "gzip", "Idempotency-Key": "gz"}, "\x1f\x8b\x08\x00garbage")
	if r.code != http.StatusBadRequest {
		t.Errorf("gzip: %d %s", r.code, r.body)
	}
	// Headers beyond the server's limit.
	r = call(t, e, "GET", create, alice, map[string]string{"X-Big": strings.Repeat("a", 2<<20)}, "")
	if r.code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("2 MiB header: %d", r.code)
	}
	// gRPC: messages over the server's 4 MiB receive limit.
	req2 := baseReq()
	req2.Description = strings.Repeat("x", 5<<20)
	_, err := c.CreateScheduledPayment(authed(alice, "idempotency-key", "huge"), req2)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gRPC 5 MiB create: %v, want ResourceExhausted", err)
	}
	items := make([]*createReq, 1001)
	for i := range items {
		items[i] = baseReq()
		items[i].RequestId = fmt.Sprint("big-", i)
		items[i].Description = strings.Repeat("d", 5000)
	}
	_, err = c.BatchCreateScheduledPayments(authed(alice), &payschedv1.BatchCreateScheduledPaymentsRequest{Items: items})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gRPC 5 MB batch: %v, want ResourceExhausted", err)
	}
	unchanged(t, e, before, "sizes")
}

// ---- batchCreate -----------------------------------------------------------------

func TestBatchCreateBoundaries(t *testing.T) {
	e := start(t)
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	alice := token(t, "alice")
	items := func(n int, prefix string) []*createReq {
		out := make([]*createReq, n)
		for i := range out {
			out[i] = baseReq()
			out[i].RequestId = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	restItems := func(its []*createReq) string {
		var parts []string
		for _, it := range its {
			parts = append(parts, restBody(it))
		}
		return `{"items":[` + strings.Join(parts, ",") + `]}`
	}
	for _, n := range []int{0, 1001} {
		before := rows(t, e)
		its := items(n, fmt.Sprint("n", n))
		r := call(t, e, "POST", create+":batchCreate", alice, nil, restItems(its))
		if pe, _ := parseError(r.body); r.code != http.StatusBadRequest || !hasField(pe.fields, "items") {
			t.Errorf("REST %d items: %d %.200s", n, r.code, r.body)
		}
		_, err := c.BatchCreateScheduledPayments(authed(alice), &payschedv1.BatchCreateScheduledPaymentsRequest{Items: its})
		if status.Code(err) != codes.InvalidArgument || !hasField(grpcFields(err), "items") {
			t.Errorf("gRPC %d items: %v", n, err)
		}
		unchanged(t, e, before, fmt.Sprint(n, " items"))
	}
	for _, n := range []int{1, 1000} {
		before := rows(t, e)
		r := call(t, e, "POST", create+":batchCreate", alice, nil, restItems(items(n, fmt.Sprint("rest", n))))
		if r.code != http.StatusOK {
			t.Errorf("REST %d items: %d %.200s", n, r.code, r.body)
		}
		out, err := c.BatchCreateScheduledPayments(authed(alice), &payschedv1.BatchCreateScheduledPaymentsRequest{Items: items(n, fmt.Sprint("grpc", n))})
		if err != nil || len(out.GetResults()) != n {
			t.Errorf("gRPC %d items: %v", n, err)
		}
		if got := rows(t, e) - before; got != 4*n {
			t.Errorf("%d items over both transports wrote %d rows, want %d", n, got, 4*n)
		}
	}

	// Every create case as a batch item: the bad ones are rejected alone,
	// by field, and the good ones are created, in the same batch.
	var batch []*createReq
	var want []createCase
	for i, tc := range createCases() {
		it := baseReq()
		tc.mut(it)
		if !tc.ownKey {
			it.RequestId = fmt.Sprint("item-", i)
		}
		batch = append(batch, it)
		want = append(want, tc)
	}
	for _, transport := range []string{"rest", "grpc"} {
		t.Run("items/"+transport, func(t *testing.T) {
			before := rows(t, e)
			tok := token(t, "batch-"+transport)
			type result struct {
				Outcome, Reason string
				Fields          []string
			}
			var results []result
			if transport == "rest" {
				var restable []*createReq
				for i, it := range batch {
					if want[i].grpcOnly {
						it = baseReq()
						it.RequestId = fmt.Sprint("placeholder-", i)
					}
					restable = append(restable, it)
				}
				r := call(t, e, "POST", create+":batchCreate", tok, nil, restItems(restable))
				var out struct {
					Results []struct {
						Outcome, Reason string
						FieldViolations []struct{ Field string }
					}
				}
				if r.code != http.StatusOK || json.Unmarshal(r.body, &out) != nil {
					t.Fatalf("%d %.500s", r.code, r.body)
				}
				for _, x := range out.Results {
					res := result{Outcome: x.Outcome, Reason: x.Reason}
					for _, fv := range x.FieldViolations {
						res.Fields = append(res.Fields, fv.Field)
					}
					results = append(results, res)
				}
			} else {
				var b []byte
				for _, it := range batch {
					b = protowire.AppendTag(b, 1, protowire.BytesType)
					b = protowire.AppendBytes(b, rawReq(it))
				}
				var out payschedv1.BatchCreateScheduledPaymentsResponse
				if err := invoke(authed(tok), e, "BatchCreateScheduledPayments", b, &out); err != nil {
					t.Fatal(err)
				}
				for _, x := range out.GetResults() {
					res := result{Outcome: x.GetOutcome().String(), Reason: x.GetReason()}
					for _, fv := range x.GetFieldViolations() {
						res.Fields = append(res.Fields, fv.GetField())
					}
					results = append(results, res)
				}
			}
			if len(results) != len(batch) {
				t.Fatalf("%d results for %d items", len(results), len(batch))
			}
			created := 0
			for i, tc := range want {
				got := results[i]
				if transport == "rest" && tc.grpcOnly {
					created++
					continue
				}
				accept := len(tc.fields) == 0 && tc.reason == ""
				switch {
				case accept && got.Outcome != "OUTCOME_CREATED":
					t.Errorf("%s: %+v, want created", tc.name, got)
				case !accept && got.Outcome != "OUTCOME_REJECTED":
					t.Errorf("%s: %+v, want rejected", tc.name, got)
				case !accept && len(tc.fields) > 0 && !hasField(got.Fields, append([]string{"requestId"}, tc.fields...)...):
					t.Errorf("%s: violations %v do not name %v", tc.name, got.Fields, tc.fields)
				}
				if accept {
					created++
				}
			}
			if got := rows(t, e) - before; got != 2*created {
				t.Errorf("batch wrote %d rows, want %d (2 per created item)", got, 2*created)
			}
		})
	}
}

// ---- list: page sizes and cursors ----------------------------------------------

func TestListPageSizesAndCursors(t *testing.T) {
	e := start(t)
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	alice, bob := token(t, "alice"), token(t, "bob")
	var its []string
	for i := range 510 {
		its = append(its, fmt.Sprintf(`{"requestId":"l%d","payee":"bob","amount":1,"dueAt":%q}`, i, future(time.Hour)))
	}
	if r := call(t, e, "POST", create+":batchCreate", alice, nil, `{"items":[`+strings.Join(its, ",")+`]}`); r.code != http.StatusOK {
		t.Fatalf("seed: %d", r.code)
	}
	call(t, e, "POST", create, bob, key("b"), body("alice", 1, future(time.Hour)))

	count := func(r resp) (int, string) {
		var out struct {
			Payments   []json.RawMessage
			NextCursor string
		}
		_ = json.Unmarshal(r.body, &out)
		return len(out.Payments), out.NextCursor
	}
	for _, c := range []struct {
		q    string
		code int
		n    int
	}{
		{"", 200, payments.DefaultPageSize},
		{"?pageSize=0", 200, payments.DefaultPageSize},
		{"?pageSize=1", 200, 1},
		{"?pageSize=500", 200, 500},
		{"?pageSize=501", 200, 500},
		{"?pageSize=100000", 200, 500},
		{"?pageSize=2147483647", 200, 500},
		{"?pageSize=2147483648", 400, 0},
		{"?pageSize=99999999999999999999", 400, 0},
		{"?pageSize=-1", 400, 0},
		{"?pageSize=-2147483648", 400, 0},
		{"?pageSize=1.5", 400, 0},
		{"?pageSize=1e3", 400, 0},
		{"?pageSize=", 400, 0},
		{"?pageSize=10&pageSize=20", 400, 0},
	} {
		r := call(t, e, "GET", create+c.q, alice, nil, "")
		n, _ := count(r)
		if r.code != c.code || (c.code == 200 && n != c.n) {
			t.Errorf("list%s: %d with %d payments, want %d with %d", c.q, r.code, n, c.code, c.n)
		}
	}
	for _, c2 := range []struct {
		size int32
		ok   bool
		n    int
	}{{math.MaxInt32, true, 500}, {-1, false, 0}, {math.MinInt32, false, 0}, {501, true, 500}} {
		out, err := c.ListScheduledPayments(authed(alice), &payschedv1.ListScheduledPaymentsRequest{PageSize: c2.size})
		notServerError(t, "list", err)
		if (err == nil) != c2.ok || len(out.GetPayments()) != c2.n {
			t.Errorf("gRPC pageSize %d: %v with %d", c2.size, err, len(out.GetPayments()))
		}
	}

	_, cur := count(call(t, e, "GET", create+"?pageSize=2", alice, nil, ""))
	_, pendingCur := count(call(t, e, "GET", create+"?pageSize=2&status=PENDING", alice, nil, ""))
	if cur == "" || pendingCur == "" {
		t.Fatal("no cursors")
	}
	// Cursors forged with the real secret but positions a client never got.
	forge := cursor.NewSigner([]byte("cursor")) // testConfig's secret
	bad := map[string]string{
		"garbage":               "garbage",
		"empty base64 groups":   "====",
		"standard alphabet":     strings.NewReplacer("-", "+", "_", "/").Replace(cur) + "+/",
		"padded":                cur + "==",
		"truncated":             cur[:len(cur)-4],
		"extended":              cur + "AAAA",
		"doubled":               cur + cur,
		"10 KB":                 strings.Repeat("A", 10_000),
		"whitespace":            " " + cur,
		"bob's actor":           "", // filled below
		"another filter":        pendingCur,
		"position 0":            forge.Encode(0, "alice\x00"),
		"position -1":           forge.Encode(-1, "alice\x00"),
		"position MinInt64":     forge.Encode(math.MinInt64, "alice\x00"),
		"other secret":          cursor.NewSigner([]byte("other")).Encode(5, "alice\x00"),
		"scope confusion":       forge.Encode(5, "alice"),
		"scope with the filter": forge.Encode(5, "alice\x00PENDING\x00"),
	}
	raw, _ := base64.RawURLEncoding.DecodeString(cur)
	for i := range len(raw) * 8 {
		flipped := slices.Clone(raw)
		flipped[i/8] ^= 1 << (i % 8)
		bad[fmt.Sprint("bit flip ", i)] = base64.RawURLEncoding.EncodeToString(flipped)
	}
	for name, cu := range bad {
		tok := alice
		if name == "bob's actor" {
			cu, tok = cur, bob
		}
		r := call(t, e, "GET", create+"?pageSize=2&cursor="+url.QueryEscape(cu), tok, nil, "")
		if pe, _ := parseError(r.body); r.code != http.StatusBadRequest || pe.reason != apierr.ReasonInvalidCursor {
			t.Errorf("cursor %s: %d %s, want 400 INVALID_CURSOR", name, r.code, r.body)
		}
		_, err := c.ListScheduledPayments(authed(tok), &payschedv1.ListScheduledPaymentsRequest{PageSize: 2, Cursor: cu})
		if status.Code(err) != codes.InvalidArgument || apierr.Reason(err) != apierr.ReasonInvalidCursor {
			t.Errorf("gRPC cursor %s: %v", name, err)
		}
	}
	// A forged cursor past the newest row is merely the first page.
	r := call(t, e, "GET", create+"?pageSize=3&cursor="+forge.Encode(math.MaxInt64, "alice\x00"), alice, nil, "")
	if n, _ := count(r); r.code != http.StatusOK || n != 3 {
		t.Errorf("cursor at MaxInt64: %d %d", r.code, n)
	}
	// The right cursor with the right filter still works.
	if r := call(t, e, "GET", create+"?pageSize=2&status=PENDING&cursor="+pendingCur, alice, nil, ""); r.code != http.StatusOK {
		t.Errorf("genuine cursor: %d %s", r.code, r.body)
	}
}

// ---- other actors' payments ------------------------------------------------------

func TestCrossActorAccess(t *testing.T) {
	e := start(t)
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	alice, mallory := token(t, "alice"), token(t, "mallory")
	r := call(t, e, "POST", create, alice, key("shared-key"), body("bob", 1, future(time.Hour)))
	id := r.json(t)["paymentId"].(string)
	missing := uuid.New().String()

	dbStatus := func() string {
		var s string
		if err := e.db.QueryRow(t.Context(), `SELECT status FROM payments WHERE id = $1`, id).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	foreign := call(t, e, "GET", create+"/"+id, mallory, nil, "")
	absent := call(t, e, "GET", create+"/"+missing, mallory, nil, "")
	if foreign.code != http.StatusNotFound || string(foreign.body) != string(absent.body) {
		t.Fatalf("foreign get: %d %s; missing: %s", foreign.code, foreign.body, absent.body)
	}
	for _, v := range []string{id, strings.ToUpper(id)} {
		for _, m := range []string{"GET", "DELETE"} {
			if r := call(t, e, m, create+"/"+v, mallory, nil, ""); r.code != http.StatusNotFound {
				t.Errorf("mallory %s %s: %d %s, want 404", m, v, r.code, r.body)
			}
		}
	}
	if r := call(t, e, "GET", create+"/"+strings.ToUpper(id), alice, nil, ""); r.code != http.StatusOK {
		t.Errorf("alice's own id in upper case: %d", r.code)
	}
	for _, v := range []string{"urn:uuid:" + id, "{" + id + "}", strings.ReplaceAll(id, "-", "")} {
		if r := call(t, e, "GET", create+"/"+url.PathEscape(v), alice, nil, ""); r.code != http.StatusBadRequest {
			t.Errorf("id form %q: %d, want 400", v, r.code)
		}
	}
	_, err := c.GetScheduledPayment(authed(mallory), &payschedv1.GetScheduledPaymentRequest{PaymentId: id})
	if codeOf(err) != codes.NotFound {
		t.Errorf("gRPC foreign get: %v", err)
	}
	_, err = c.CancelScheduledPayment(authed(mallory), &payschedv1.CancelScheduledPaymentRequest{PaymentId: id})
	if codeOf(err) != codes.NotFound {
		t.Errorf("gRPC foreign cancel: %v", err)
	}
	if s := dbStatus(); s != "PENDING" {
		t.Fatalf("mallory's cancels changed alice's payment to %s", s)
	}
	for _, q := range []string{"", "?status=PENDING", "?pageSize=500"} {
		var out struct{ Payments []map[string]any }
		r := call(t, e, "GET", create+q, mallory, nil, "")
		if err := json.Unmarshal(r.body, &out); err != nil || r.code != http.StatusOK || len(out.Payments) != 0 {
			t.Errorf("mallory lists %s: %d %s", q, r.code, r.body)
		}
	}
	l, err := c.ListScheduledPayments(authed(mallory), &payschedv1.ListScheduledPaymentsRequest{})
	if err != nil || len(l.GetPayments()) != 0 {
		t.Errorf("gRPC: mallory lists %v %v", err, l)
	}
	// The same idempotency key from mallory is mallory's own payment, never a replay of alice's.
	r = call(t, e, "POST", create, mallory, key("shared-key"), body("bob", 1, future(time.Hour)))
	if r.code != http.StatusCreated || r.json(t)["paymentId"] == id || r.json(t)["payer"] != "mallory" {
		t.Errorf("mallory reuses alice's key: %d %s", r.code, r.body)
	}
	// A batch item cannot reach alice's key either.
	bo, err := c.BatchCreateScheduledPayments(authed(mallory), &payschedv1.BatchCreateScheduledPaymentsRequest{Items: []*createReq{
		{RequestId: "shared-key", Payee: "bob", Amount: 1, DueAt: timestamppb.New(time.Now().Add(time.Hour))},
	}})
	if err != nil || bo.GetResults()[0].GetPayment().GetPaymentId() == id {
		t.Errorf("mallory's batch: %v %v", err, bo)
	}
	if s := dbStatus(); s != "PENDING" {
		t.Fatalf("alice's payment is %s", s)
	}
	if r := call(t, e, "DELETE", create+"/"+id, alice, nil, ""); r.code != http.StatusOK {
		t.Fatalf("alice cancels her own: %d", r.code)
	}
}

func codeOf(err error) codes.Code { return status.Code(err) }

// ---- tokens ----------------------------------------------------------------------

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func sign(t *testing.T, secret string, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEveryAuthFailureIs401: every bad token, on every method, is 401 with
// WWW-Authenticate (REST) or Unauthenticated (gRPC), and writes nothing.
func TestEveryAuthFailureIs401(t *testing.T) {
	e := start(t)
	now := time.Now()
	good := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "alice", "iss": auth.DefaultIssuer, "aud": auth.DefaultAudience,
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	}
	with := func(k string, v any) jwt.MapClaims {
		c := good()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	unsigned := func(header string, claims jwt.MapClaims, sig string) string {
		p, _ := json.Marshal(claims)
		return b64(header) + "." + b64(string(p)) + "." + sig
	}
	signWith := func(m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	goodTok := sign(t, testSecret, good())
	parts := strings.Split(goodTok, ".")
	cases := map[string]string{
		"missing":               "",
		"garbage":               "not-a-jwt",
		"two parts":             parts[0] + "." + parts[1],
		"alg none":              unsigned(`{"alg":"none","typ":"JWT"}`, good(), ""),
		"alg None":              unsigned(`{"alg":"None","typ":"JWT"}`, good(), ""),
		"alg NONE with sig":     unsigned(`{"alg":"NONE","typ":"JWT"}`, good(), parts[2]),
		"alg missing":           unsigned(`{"typ":"JWT"}`, good(), parts[2]),
		"alg RS256 with HMAC":   unsigned(`{"alg":"RS256","typ":"JWT"}`, good(), parts[2]),
		"wrong key":             sign(t, "another-secret", good()),
		"empty key":             signWith(jwt.SigningMethodHS256, []byte{}, good()),
		"HS512 right key":       signWith(jwt.SigningMethodHS512, []byte(testSecret), good()),
		"HS384 right key":       signWith(jwt.SigningMethodHS384, []byte(testSecret), good()),
		"payload swapped":       parts[0] + "." + b64(`{"sub":"mallory","iss":"paysched-local","aud":"paysched","exp":`+fmt.Sprint(now.Add(time.Hour).Unix())+`}`) + "." + parts[2],
		"signature stripped":    parts[0] + "." + parts[1] + ".",
		"signature bit flip":    parts[0] + "." + parts[1] + "." + flipB64(parts[2]),
		"expired":               sign(t, testSecret, with("exp", now.Add(-2*time.Minute).Unix())),
		"no exp":                sign(t, testSecret, with("exp", nil)),
		"exp as string":         sign(t, testSecret, with("exp", "never")),
		"not yet valid (nbf)":   sign(t, testSecret, with("nbf", now.Add(time.Hour).Unix())),
		"future iat":            sign(t, testSecret, with("iat", now.Add(time.Hour).Unix())),
		"wrong audience":        sign(t, testSecret, with("aud", "someone-else")),
		"audience list without": sign(t, testSecret, with("aud", []string{"a", "b"})),
		"no audience":           sign(t, testSecret, with("aud", nil)),
		"wrong issuer":          sign(t, testSecret, with("iss", "evil")),
		"no issuer":             sign(t, testSecret, with("iss", nil)),
		"no subject":            sign(t, testSecret, with("sub", nil)),
		"empty subject":         sign(t, testSecret, with("sub", "")),
		"subject too long":      sign(t, testSecret, with("sub", strings.Repeat("a", 257))),
		"subject not a string":  sign(t, testSecret, with("sub", 42)),
		"subject with NUL":      sign(t, testSecret, with("sub", "ali\x00ce")),
		"subject with newline":  sign(t, testSecret, with("sub", "alice\nadmin")),
		"kid path traversal":    jwtWithKid(t, "../../../../dev/null", good()),
	}
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	id := uuid.New().String()
	dueAt := timestamppb.New(now.Add(time.Hour))
	before := rows(t, e)
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			for _, rc := range []struct{ method, path, body string }{
				{"GET", create, ""},
				{"GET", create + "/" + id, ""},
				{"DELETE", create + "/" + id, ""},
				{"POST", create, body("bob", 1, future(time.Hour))},
				{"POST", create + ":batchCreate", `{"items":[{"requestId":"x","payee":"bob","amount":1,"dueAt":"` + future(time.Hour) + `"}]}`},
			} {
				r := call(t, e, rc.method, rc.path, tok, key("auth-"+name), rc.body)
				if pe, _ := parseError(r.body); r.code != http.StatusUnauthorized || pe.reason != apierr.ReasonUnauthenticated {
					t.Errorf("REST %s %s: %d %s", rc.method, rc.path, r.code, r.body)
				}
				// RFC 6750 §3: no error code without credentials,
				// invalid_token with them.
				want := `Bearer realm="paysched", error="invalid_token", error_description="invalid or expired bearer token"`
				if tok == "" {
					want = `Bearer realm="paysched"`
				}
				if got := r.header.Get("WWW-Authenticate"); got != want {
					t.Errorf("REST %s %s: WWW-Authenticate %q, want %q", rc.method, rc.path, got, want)
				}
			}
			ctx := context.Background()
			if tok != "" {
				ctx = authed(tok, "idempotency-key", "auth")
			}
			calls := map[string]error{}
			_, calls["list"] = c.ListScheduledPayments(ctx, &payschedv1.ListScheduledPaymentsRequest{})
			_, calls["get"] = c.GetScheduledPayment(ctx, &payschedv1.GetScheduledPaymentRequest{PaymentId: id})
			_, calls["cancel"] = c.CancelScheduledPayment(ctx, &payschedv1.CancelScheduledPaymentRequest{PaymentId: id})
			_, calls["create"] = c.CreateScheduledPayment(ctx, &createReq{Payee: "bob", Amount: 1, DueAt: dueAt})
			_, calls["batch"] = c.BatchCreateScheduledPayments(ctx, &payschedv1.BatchCreateScheduledPaymentsRequest{Items: []*createReq{
				{RequestId: "x", Payee: "bob", Amount: 1, DueAt: dueAt}}})
			for m, err := range calls {
				if codeOf(err) != codes.Unauthenticated {
					t.Errorf("gRPC %s: %v", m, err)
				}
			}
			unchanged(t, e, before, name)
		})
	}
	for _, h := range []string{"Basic YWxpY2U6eA==", "Bearer", "Bearer ", goodTok, "Token " + goodTok, "Bearer " + goodTok + " extra"} {
		if r := call(t, e, "GET", create, "", map[string]string{"Authorization": h}, ""); r.code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d", h, r.code)
		}
	}
	// A token in the query string is not a credential.
	if r := call(t, e, "GET", create+"?access_token="+goodTok, "", nil, ""); r.code != http.StatusUnauthorized {
		t.Errorf("token in query: %d", r.code)
	}
	// gRPC: two authorization values are refused even if one is good.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+goodTok, "authorization", "Bearer x")
	if _, err := c.ListScheduledPayments(ctx, &payschedv1.ListScheduledPaymentsRequest{}); codeOf(err) != codes.Unauthenticated {
		t.Errorf("two authorization values: %v", err)
	}
	// The controls: the good token passes, whatever the scheme's case.
	for _, h := range []string{"Bearer " + goodTok, "bearer " + goodTok, "BEARER  " + goodTok} {
		if r := call(t, e, "GET", create, "", map[string]string{"Authorization": h}, ""); r.code != http.StatusOK {
			t.Fatalf("Authorization %q: %d %s", h, r.code, r.body)
		}
	}
}

func flipB64(s string) string {
	b, _ := base64.RawURLEncoding.DecodeString(s)
	b[0] ^= 1
	return base64.RawURLEncoding.EncodeToString(b)
}

func jwtWithKid(t *testing.T, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tk := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tk.Header["kid"] = kid
	s, err := tk.SignedString([]byte("not-the-secret"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ---- request floods ------------------------------------------------------------

// TestPerActorRateLimit: while alice floods REST and gRPC and is refused
// (429 with Retry-After; ResourceExhausted with RATE_LIMITED and
// RetryInfo), bob's requests all succeed, and refused creates write nothing.
func TestPerActorRateLimit(t *testing.T) {
	e := start(t, func(c *paymentsserver.Config) { c.RateLimit = ratelimit.Config{Rate: 20, Burst: 20} })
	c := payschedv1.NewPaymentsServiceClient(e.cc)
	alice, bob := token(t, "alice"), token(t, "bob")

	var created, limited, grpcLimited, seq atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	fail := make(chan string, 100)
	floodStart := time.Now()
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if w%2 == 0 {
					_, err := c.CreateScheduledPayment(authed(alice, "idempotency-key", fmt.Sprint("g", seq.Add(1))),
						&createReq{Payee: "bob", Amount: 1, DueAt: timestamppb.New(time.Now().Add(time.Hour))})
					switch {
					case err == nil:
						created.Add(1)
					case codeOf(err) == codes.ResourceExhausted:
						grpcLimited.Add(1)
						if apierr.Reason(err) != apierr.ReasonRateLimited || retryDelay(err) <= 0 {
							fail <- fmt.Sprintf("gRPC refusal without RATE_LIMITED and RetryInfo: %v", err)
						}
					default:
						fail <- fmt.Sprintf("gRPC flood: %v", err)
					}
					continue
				}
				req, _ := http.NewRequest("POST", e.base+create, strings.NewReader(body("bob", 1, future(time.Hour))))
				req.Header.Set("Authorization", "Bearer "+alice)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", fmt.Sprint("r", seq.Add(1)))
				res, err := client.Do(req)
				if err != nil {
					fail <- err.Error()
					continue
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if err := contractError(req, res.StatusCode, res.Header, b); err != nil {
					fail <- err.Error()
				}
				switch res.StatusCode {
				case http.StatusCreated:
					created.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
					pe, _ := parseError(b)
					if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 || pe.reason != apierr.ReasonRateLimited || pe.retry == "" {
						fail <- fmt.Sprintf("429 without Retry-After, RATE_LIMITED or RetryInfo: %v %s", res.Header, b)
					}
				default:
					fail <- fmt.Sprintf("REST flood: %d %s", res.StatusCode, b)
				}
			}
		}()
	}
	// While alice floods, bob works normally on both transports.
	time.Sleep(100 * time.Millisecond)
	for i := range 10 {
		if r := call(t, e, "POST", create, bob, key(fmt.Sprint("bob-", i)), body("alice", 1, future(time.Hour))); r.code != http.StatusCreated {
			t.Errorf("bob's create during the flood: %d %s", r.code, r.body)
		}
		if _, err := c.ListScheduledPayments(authed(bob), &payschedv1.ListScheduledPaymentsRequest{PageSize: 1}); err != nil {
			t.Errorf("bob's gRPC list during the flood: %v", err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	flood := time.Since(floodStart)
	close(fail)
	for f := range fail {
		t.Error(f)
	}
	if limited.Load() == 0 || grpcLimited.Load() == 0 {
		t.Fatalf("the flood was never limited: REST %d, gRPC %d refusals", limited.Load(), grpcLimited.Load())
	}
	// A burst of 20, then 20/s.
	if n, most := created.Load(), 20+int64(20*flood.Seconds())+1; n < 20 || n > most {
		t.Errorf("alice created %d payments in %v, want 20 to %d", n, flood, most)
	}
	var alices int
	if err := e.db.QueryRow(t.Context(), `SELECT count(*) FROM payment_index WHERE payer = 'alice'`).Scan(&alices); err != nil {
		t.Fatal(err)
	}
	if int64(alices) != created.Load() {
		t.Errorf("%d of alice's payments stored, %d created: refused requests wrote", alices, created.Load())
	}
	t.Logf("alice in %v: %d created, %d REST 429, %d gRPC ResourceExhausted", flood, created.Load(), limited.Load(), grpcLimited.Load())

	// Unauthenticated calls and health checks are not counted against anyone.
	for range 50 {
		if r := call(t, e, "GET", "/healthz", "", nil, ""); r.code != http.StatusOK {
			t.Fatalf("healthz: %d", r.code)
		}
	}
}

func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}
