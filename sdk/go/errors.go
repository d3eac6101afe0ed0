package paysched

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Error is the API's refusal: the HTTP status, the google.rpc.Status the
// body carries, its ErrorInfo reason and metadata, and its field
// violations. errors.Is matches it against the Err* reasons below.
type Error struct {
	HTTPStatus int
	// Code is the gRPC status code's name (INVALID_ARGUMENT, NOT_FOUND...).
	Code    string
	Message string
	// Reason is the ErrorInfo reason (IDEMPOTENCY_KEY_REUSED...).
	Reason   string
	Metadata map[string]string
	// Violations are the fields a VALIDATION_FAILED answer names.
	Violations []FieldViolation
	// RequestID is the server's x-request-id, for its logs.
	RequestID string
}

// FieldViolation is one invalid field of a request.
type FieldViolation struct {
	Field       string
	Description string
}

// Error says the status, the reason and the message.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "paysched: %d", e.HTTPStatus)
	if e.Reason != "" {
		b.WriteString(" " + e.Reason)
	} else if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	for _, v := range e.Violations {
		fmt.Fprintf(&b, "; %s %s", v.Field, v.Description)
	}
	return b.String()
}

// Is matches target when it is a reason sentinel (ErrNotFound...) with
// this error's reason; a refusal with no reason (a proxy's 503 or 429)
// matches by its status.
func (e *Error) Is(target error) bool {
	r, ok := target.(reason)
	if !ok {
		return false
	}
	if e.Reason == "" {
		switch e.HTTPStatus {
		case http.StatusServiceUnavailable:
			return r == ErrUnavailable
		case http.StatusTooManyRequests:
			return r == ErrRateLimited
		case http.StatusNotFound:
			return r == ErrNotFound
		case http.StatusUnauthorized:
			return r == ErrUnauthenticated
		}
	}
	return string(r) == e.Reason
}

// reason is a sentinel error naming an ErrorInfo reason.
type reason string

func (r reason) Error() string { return "paysched: " + string(r) }

// The reasons a client acts on (errors.Is(err, paysched.ErrNotFound)).
var (
	// ErrIdempotencyKeyReused: the key was used for a request with another
	// body (409): a new key is a new payment.
	ErrIdempotencyKeyReused error = reason("IDEMPOTENCY_KEY_REUSED")
	// ErrAlreadyProcessing: the payment is being charged and can no longer
	// be cancelled (409).
	ErrAlreadyProcessing error = reason("ALREADY_PROCESSING")
	// ErrValidation: a field is invalid (400); Error.Violations says which.
	ErrValidation error = reason("VALIDATION_FAILED")
	// ErrNotFound: no such payment, schedule or endpoint of the caller's (404).
	ErrNotFound error = reason("NOT_FOUND")
	// ErrRateLimited: too many requests (429), after the SDK's retries.
	ErrRateLimited error = reason("RATE_LIMITED")
	// ErrUnavailable: the server could not answer (503), after the retries.
	ErrUnavailable error = reason("UNAVAILABLE")
	// ErrUnauthenticated: no valid token (401).
	ErrUnauthenticated error = reason("UNAUTHENTICATED")
	// ErrScheduleState: the schedule is in no state the change may leave
	// (400; Metadata["state"] says which).
	ErrScheduleState error = reason("SCHEDULE_STATE")
	// ErrTooManyPending: the payer has too many payments waiting (429).
	ErrTooManyPending error = reason("TOO_MANY_PENDING")
	// ErrNoTenant: the token names no tenant, which webhook endpoints need.
	ErrNoTenant error = reason("NO_TENANT")
)

// rpcStatus is google.rpc.Status as grpc-gateway writes it.
type rpcStatus struct {
	Code    json.RawMessage   `json:"code"`
	Message string            `json:"message"`
	Details []json.RawMessage `json:"details"`
}

type detail struct {
	Type            string            `json:"@type"`
	Reason          string            `json:"reason"`
	Metadata        map[string]string `json:"metadata"`
	FieldViolations []struct {
		Field       string `json:"field"`
		Description string `json:"description"`
	} `json:"fieldViolations"`
}

// codeNames are the gRPC codes by number, as the status carries them.
var codeNames = []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
	"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
	"UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// errorFrom reads an answer that is not the one wanted as an *Error.
func errorFrom(status int, header http.Header, body []byte) *Error {
	e := &Error{HTTPStatus: status, RequestID: header.Get("X-Request-Id")}
	var s rpcStatus
	if json.Unmarshal(body, &s) != nil {
		e.Message = strings.TrimSpace(string(body))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200]
		}
		return e
	}
	e.Message = s.Message
	var n int
	if json.Unmarshal(s.Code, &n) == nil && n >= 0 && n < len(codeNames) {
		e.Code = codeNames[n]
	} else {
		_ = json.Unmarshal(s.Code, &e.Code)
	}
	for _, raw := range s.Details {
		var d detail
		if json.Unmarshal(raw, &d) != nil {
			continue
		}
		switch {
		case strings.HasSuffix(d.Type, "google.rpc.ErrorInfo"):
			e.Reason, e.Metadata = d.Reason, d.Metadata
		case strings.HasSuffix(d.Type, "google.rpc.BadRequest"):
			for _, v := range d.FieldViolations {
				e.Violations = append(e.Violations, FieldViolation{Field: v.Field, Description: v.Description})
			}
		}
	}
	return e
}
