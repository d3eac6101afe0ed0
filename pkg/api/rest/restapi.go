// Package rest is the REST face of the API: grpc-gateway over the same
// gRPC handlers, plus what HTTP needs on top: bearer authentication, body
// limits and strict JSON checks that report every bad field, status codes
// (201 on create), and the health, metrics and OpenAPI endpoints (the
// public document to anyone, the admin one to admin callers only).
package rest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/jsoncodec"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/platform/obs"
	"github.com/paysched/paysched/pkg/platform/tracing"
)

// Body limits.
const (
	MaxCreateBody = 64 << 10
	MaxBatchBody  = 8 << 20
	// MaxOtherBody bounds every other POST body (the admin actions).
	MaxOtherBody = 64 << 10
)

// bodyRule says how a POST route's body is checked before the gateway
// decodes it.
type bodyRule struct {
	limit int64
	msg   func() proto.Message
}

var bodies = map[string]bodyRule{
	"/v1/scheduled-payments": {MaxCreateBody, func() proto.Message { return &payschedv1.CreateScheduledPaymentRequest{} }},
	"/v1/scheduled-payments:batchCreate": {MaxBatchBody, func() proto.Message {
		return &payschedv1.BatchCreateScheduledPaymentsRequest{}
	}},
}

// httpStatusByReason overrides the gateway's code-to-status mapping where
// HTTP has a more precise answer.
var httpStatusByReason = map[string]int{
	apierr.ReasonBodyTooLarge:     http.StatusRequestEntityTooLarge,
	apierr.ReasonUnsupportedMedia: http.StatusUnsupportedMediaType,
	"METHOD_NOT_ALLOWED":          http.StatusMethodNotAllowed,
}

// Options wires the REST handler: payments-api's (Payments) or
// admin-api's (Admin).
type Options struct {
	// Payments, if set, serves /v1/scheduled-payments...
	Payments payschedv1.PaymentsServiceServer
	// Webhooks, if set, serves a tenant's /v1/webhook-endpoints and
	// /v1/webhook-attempts.
	Webhooks payschedv1.WebhooksServiceServer
	// Schedules, if set, serves the payer's /v1/schedules.
	Schedules payschedv1.SchedulesServiceServer
	// Admin, if set, serves /v1/admin/... (it checks the admin claim itself).
	Admin payschedv1.AdminServiceServer
	// CreateViolations validates a create body that failed to decode in
	// part, so its other mistakes are reported too.
	CreateViolations func(*payschedv1.CreateScheduledPaymentRequest) []apierr.Violation
	Verifier         *auth.Verifier
	// Admit, if set, runs after authentication on every API request and
	// refuses it with its error (the per-actor rate limit).
	Admit func(context.Context) error
	// Ready reports whether the service can serve (the database answers).
	Ready func(context.Context) error
	// OpenAPI is the public document, served at /openapi.json and
	// /v1/openapi.json without authentication (none when nil).
	OpenAPI []byte
	// OpenAPIv3 is the public document as OpenAPI 3, served at
	// /openapi.v3.json without authentication.
	OpenAPIv3 []byte
	// AdminOpenAPI is the admin document, served at /v1/admin/openapi.json
	// to callers whose token has the admin claim (403 otherwise).
	AdminOpenAPI []byte
	// Metrics, if set, is served at /metrics. The APIs serve theirs on
	// an internal listener instead (svc.Server.InternalListener).
	Metrics http.Handler
	RPC     *obs.RPCMetrics
	Log     *slog.Logger
}

// New returns the HTTP handler.
func New(ctx context.Context, o Options) (http.Handler, error) {
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, jsoncodec.NewMarshaler()),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithForwardResponseOption(statusFromMetadata),
		runtime.WithErrorHandler(errorHandler),
		runtime.WithRoutingErrorHandler(routingErrorHandler),
		runtime.WithDisablePathLengthFallback(),
	)
	// The services this API serves: those given.
	for _, svc := range []struct {
		given    bool
		register func() error
	}{
		{o.Payments != nil, func() error { return payschedv1.RegisterPaymentsServiceHandlerServer(ctx, gw, o.Payments) }},
		{o.Webhooks != nil, func() error { return payschedv1.RegisterWebhooksServiceHandlerServer(ctx, gw, o.Webhooks) }},
		{o.Schedules != nil, func() error { return payschedv1.RegisterSchedulesServiceHandlerServer(ctx, gw, o.Schedules) }},
		{o.Admin != nil, func() error { return payschedv1.RegisterAdminServiceHandlerServer(ctx, gw, o.Admin) }},
	} {
		if !svc.given {
			continue
		}
		if err := svc.register(); err != nil {
			return nil, err
		}
	}
	api := &apiHandler{gw: gw, verifier: o.Verifier, admit: o.Admit, log: o.Log, createViolations: o.CreateViolations,
		adminOpenAPI: o.AdminOpenAPI}

	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := o.Ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"unavailable"}`)
			return
		}
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	if o.OpenAPI != nil {
		openapi := func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(o.OpenAPI)
		}
		mux.HandleFunc("GET /openapi.json", openapi)
		mux.HandleFunc("GET /v1/openapi.json", openapi)
		mux.HandleFunc("GET /openapi.v3.json", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(o.OpenAPIv3)
		})
	}
	if o.Metrics != nil {
		mux.Handle("GET /metrics", o.Metrics)
	}
	// The gateway calls the handlers in process: this span per request is
	// the parent of their statements.
	h := tracing.HTTP(routeName, mux)
	if o.RPC == nil {
		return h, nil
	}
	return o.RPC.HTTP(routeName, h), nil
}

// routeName labels metrics without unbounded ids.
func routeName(r *http.Request) string {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/scheduled-payments/"):
		return r.Method + " /v1/scheduled-payments/{id}"
	case strings.HasPrefix(p, "/v1/admin/scheduled-payments/"):
		return r.Method + " /v1/admin/scheduled-payments/{id}"
	case strings.HasPrefix(p, "/v1/admin/webhook-endpoints/"):
		return r.Method + " /v1/admin/webhook-endpoints/{id}"
	case strings.HasPrefix(p, "/v1/webhook-endpoints/"):
		return r.Method + " /v1/webhook-endpoints/{id}"
	case p == "/v1/admin/dead-letters" || p == "/v1/admin/reconciliation-runs" || p == "/v1/admin/webhook-endpoints" ||
		p == "/v1/admin/webhook-attempts" || p == "/v1/admin/tenants":
		return r.Method + " " + p
	case p == "/v1/scheduled-payments" || p == "/v1/scheduled-payments:batchCreate" ||
		p == "/v1/webhook-endpoints" || p == "/v1/webhook-attempts" ||
		p == "/healthz" || p == "/metrics" || p == "/openapi.json" || p == "/openapi.v3.json" || p == adminOpenAPIPath:
		return r.Method + " " + p
	}
	return r.Method + " other"
}

type apiHandler struct {
	gw               *runtime.ServeMux
	verifier         *auth.Verifier
	admit            func(context.Context) error
	log              *slog.Logger
	createViolations func(*payschedv1.CreateScheduledPaymentRequest) []apierr.Violation
	adminOpenAPI     []byte
}

// adminOpenAPIPath serves the admin document behind authentication: it
// describes routes only admins may call.
const adminOpenAPIPath = "/v1/admin/openapi.json"

func (h *apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := h.verifier.VerifyHeader(r.Header.Get("Authorization"))
	if err != nil {
		msg := msgInvalidToken
		if r.Header.Get("Authorization") == "" {
			msg = msgMissingToken
		}
		h.fail(w, r, auth.Unauthenticated(msg))
		return
	}
	r = r.WithContext(auth.WithPrincipal(r.Context(), p))
	if h.admit != nil {
		if err := h.admit(r.Context()); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	if r.URL.Path == adminOpenAPIPath && r.Method == http.MethodGet && h.adminOpenAPI != nil {
		if !p.Admin {
			h.fail(w, r, apierr.New(codes.PermissionDenied, apierr.ReasonPermissionDenied, "the admin claim is required", nil))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(h.adminOpenAPI)
		return
	}
	if r.Method == http.MethodPost {
		rule, checked := bodies[r.URL.Path]
		if !checked {
			// Every other POST (the admin actions) gets the same size
			// and media-type limits; its fields are the gateway's to read.
			rule.limit = MaxOtherBody
		}
		raw, err := readBody(w, r, rule.limit)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if checked {
			msg := rule.msg()
			if vs := jsoncodec.Unmarshal(raw, msg); len(vs) > 0 {
				h.fail(w, r, apierr.Invalid("the request body has invalid fields", h.merge(vs, msg)))
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
	}
	h.gw.ServeHTTP(w, r)
}

// merge adds the semantic violations of the fields that did decode.
func (h *apiHandler) merge(vs []apierr.Violation, msg proto.Message) []apierr.Violation {
	req, ok := msg.(*payschedv1.CreateScheduledPaymentRequest)
	if !ok || h.createViolations == nil {
		return vs
	}
	bad := map[string]bool{}
	for _, v := range vs {
		if v.Field == "body" {
			return vs // not an object: nothing else is meaningful
		}
		bad[jsoncodec.TopField(v.Field)] = true
	}
	for _, v := range h.createViolations(req) {
		if !bad[jsoncodec.TopField(v.Field)] {
			vs = append(vs, v)
		}
	}
	return vs
}

func (h *apiHandler) fail(w http.ResponseWriter, r *http.Request, err error) {
	_, m := runtime.MarshalerForRequest(h.gw, r)
	errorHandler(r.Context(), h.gw, m, w, r, err)
}

// readBody enforces the content type and the size limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, apierr.New(codes.InvalidArgument, apierr.ReasonUnsupportedMedia,
				"send the body as Content-Type: application/json", nil)
		}
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, apierr.New(codes.InvalidArgument, apierr.ReasonBodyTooLarge,
			"the body is larger than "+strconv.FormatInt(limit, 10)+" bytes", nil)
	}
	if err != nil {
		return nil, apierr.New(codes.InvalidArgument, apierr.ReasonInvalidArgument, "could not read the body", nil)
	}
	return raw, nil
}

func incomingHeader(key string) (string, bool) {
	if strings.EqualFold(key, "Idempotency-Key") {
		return payments.MetadataIdempotencyKey, true
	}
	return runtime.DefaultHeaderMatcher(key)
}

func outgoingHeader(key string) (string, bool) {
	switch key {
	case payments.HeaderHTTPCode:
		return "", false
	case payments.HeaderReplayed:
		return "Idempotent-Replayed", true
	}
	return runtime.MetadataHeaderPrefix + key, true
}

// statusFromMetadata applies the HTTP status a handler asked for.
func statusFromMetadata(ctx context.Context, w http.ResponseWriter, _ proto.Message) error {
	md, ok := runtime.ServerMetadataFromContext(ctx)
	if !ok {
		return nil
	}
	if vals := md.HeaderMD.Get(payments.HeaderHTTPCode); len(vals) > 0 {
		if code, err := strconv.Atoi(vals[0]); err == nil {
			w.WriteHeader(code)
		}
	}
	return nil
}

// The two 401 messages: RFC 6750 §3.1 wants no error code in the challenge
// when the request had no credentials, and invalid_token otherwise.
const (
	msgMissingToken = "missing bearer token"
	msgInvalidToken = "invalid or expired bearer token"
)

// challenge is the RFC 6750 §3 WWW-Authenticate value for a 401 whose
// message is msg.
func challenge(msg string) string {
	if msg == msgMissingToken {
		return `Bearer realm="paysched"`
	}
	// A quoted-string: escape what would end it (RFC 9110 §5.6.4).
	q := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(msg)
	return `Bearer realm="paysched", error="invalid_token", error_description="` + q + `"`
}

// errorHandler renders google.rpc.Status as JSON with the right HTTP status.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st := status.Convert(err)
	if code, ok := httpStatusByReason[apierr.Reason(err)]; ok {
		w = &forcedStatus{ResponseWriter: w, code: code}
	}
	if st.Code() == codes.Unauthenticated {
		// grpc-gateway's handler sets WWW-Authenticate to the bare message;
		// ours replaces it as the status is written.
		w = &challengeWriter{ResponseWriter: w, value: challenge(st.Message())}
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			// Retry-After counts whole seconds: round up, never to 0.
			secs := max(1, int64(math.Ceil(ri.GetRetryDelay().AsDuration().Seconds())))
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

func routingErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, code int) {
	var err error
	switch code {
	case http.StatusMethodNotAllowed:
		err = apierr.New(codes.InvalidArgument, "METHOD_NOT_ALLOWED", r.Method+" is not allowed on "+r.URL.Path, nil)
	case http.StatusNotFound:
		err = apierr.New(codes.NotFound, apierr.ReasonNotFound, "no such route: "+r.URL.Path, nil)
	default:
		err = apierr.New(codes.InvalidArgument, apierr.ReasonInvalidArgument, http.StatusText(code), nil)
	}
	errorHandler(ctx, mux, m, w, r, err)
}

type forcedStatus struct {
	http.ResponseWriter
	code int
}

func (w *forcedStatus) WriteHeader(int) { w.ResponseWriter.WriteHeader(w.code) }

// challengeWriter sets WWW-Authenticate just before the status goes out.
type challengeWriter struct {
	http.ResponseWriter
	value string
}

func (w *challengeWriter) WriteHeader(code int) {
	w.Header().Set("WWW-Authenticate", w.value)
	w.ResponseWriter.WriteHeader(code)
}
