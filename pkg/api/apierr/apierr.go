// Package apierr builds the API's errors: google.rpc.Status with an ErrorInfo
// whose reason is UPPER_SNAKE_CASE, and a BadRequest for field violations.
// The REST gateway renders the same status as JSON.
package apierr

import (
	"context"
	"errors"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// Domain is the ErrorInfo domain of every paysched error.
const Domain = "paysched.dev"

// Reasons used across the API.
const (
	ReasonValidation          = "VALIDATION_FAILED"
	ReasonIdempotencyRequired = "IDEMPOTENCY_KEY_REQUIRED"
	ReasonIdempotencyReused   = "IDEMPOTENCY_KEY_REUSED"
	ReasonAlreadyProcessing   = "ALREADY_PROCESSING"
	ReasonNotFound            = "NOT_FOUND"
	ReasonInvalidArgument     = "INVALID_ARGUMENT"
	ReasonInvalidCursor       = "INVALID_CURSOR"
	ReasonUnauthenticated     = "UNAUTHENTICATED"
	ReasonPermissionDenied    = "PERMISSION_DENIED"
	ReasonBodyTooLarge        = "BODY_TOO_LARGE"
	ReasonUnsupportedMedia    = "UNSUPPORTED_MEDIA_TYPE"
	ReasonInternal            = "INTERNAL"
	ReasonUnavailable         = "UNAVAILABLE"
	ReasonRateLimited         = "RATE_LIMITED"
	// ReasonChangedSinceRequest: an operator's action approved on a
	// payment as it was when requested (the console's four eyes) finds it
	// changed since: it is skipped, not acted on.
	ReasonChangedSinceRequest = "CHANGED_SINCE_REQUEST"
	// ReasonRunInProgress: a reconciliation run of the day is already in
	// flight; a second start is answered, not queued behind it.
	ReasonRunInProgress = "RUN_IN_PROGRESS"
)

// Violation is one invalid field.
type Violation struct {
	Field       string
	Description string
}

// New returns a status error with an ErrorInfo carrying reason and metadata.
func New(code codes.Code, reason, msg string, meta map[string]string) error {
	return with(code, msg, &errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: meta})
}

// Invalid returns INVALID_ARGUMENT with reason VALIDATION_FAILED and a
// BadRequest listing every violation.
func Invalid(msg string, vs []Violation) error {
	br := &errdetails.BadRequest{}
	for _, v := range vs {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: v.Field, Description: v.Description,
		})
	}
	return with(codes.InvalidArgument, msg, &errdetails.ErrorInfo{Reason: ReasonValidation, Domain: Domain}, br)
}

// Internal hides the cause from the client; the caller logs it.
func Internal() error {
	return New(codes.Internal, ReasonInternal, "internal error", nil)
}

// FromFailure turns a server-side failure of op into the client's error and
// logs the cause: a context the client cancelled or let expire is reported
// as such, not as our failure; an unreachable database is UNAVAILABLE
// (retry); anything else is an opaque INTERNAL.
func FromFailure(log *slog.Logger, op string, err error) error {
	if errors.Is(err, context.Canceled) {
		return New(codes.Canceled, "REQUEST_CANCELLED", "request cancelled", nil)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return New(codes.DeadlineExceeded, "DEADLINE_EXCEEDED", "deadline exceeded", nil)
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		log.Error(op+" failed: database unreachable", "err", err)
		return New(codes.Unavailable, ReasonUnavailable, "the database is unavailable; retry with the same idempotency key", nil)
	}
	log.Error(op+" failed", "err", err)
	return Internal()
}

// ParseID reads a payment id in its canonical form (36 characters); field
// names it in the violation.
func ParseID(field, id string) (uuid.UUID, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return uuid.Nil, Invalid(field+" is not a UUID",
			[]Violation{{Field: field, Description: "must be a UUID like 0190c3d2-7a4e-7b9c-8d2e-123456789abc"}})
	}
	return u, nil
}

func with(code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	for _, d := range details {
		if withD, err := st.WithDetails(d); err == nil {
			st = withD
		}
	}
	return st.Err()
}

// Reason returns the ErrorInfo reason of err, or "".
func Reason(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.Reason
		}
	}
	return ""
}

// Metadata returns the ErrorInfo metadata of err under key, or "".
func Metadata(err error, key string) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()[key]
		}
	}
	return ""
}

// Violations returns the BadRequest field violations of err.
func Violations(err error) []Violation {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var out []Violation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, fv := range br.FieldViolations {
				out = append(out, Violation{Field: fv.Field, Description: fv.Description})
			}
		}
	}
	return out
}
