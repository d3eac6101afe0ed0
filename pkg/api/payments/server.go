// Package payments implements paysched.v1.PaymentsService: the public
// scheduling API. REST reaches the same handlers through grpc-gateway.
package payments

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/cursor"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// Page sizes of List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// Response headers (gRPC metadata; REST maps them to HTTP).
const (
	// HeaderHTTPCode asks the REST gateway for an HTTP status (201 on create).
	HeaderHTTPCode = "x-http-code"
	// HeaderReplayed is "true" when a create answered from its stored response.
	HeaderReplayed = "idempotent-replayed"
	// MetadataIdempotencyKey is the gRPC metadata carrying the key
	// (REST: the Idempotency-Key header).
	MetadataIdempotencyKey = "idempotency-key"
)

// Server implements PaymentsService.
type Server struct {
	payschedv1.UnimplementedPaymentsServiceServer
	store   *store.Store
	single  *store.Batcher
	rules   Rules
	cursors *cursor.Signer
	log     *slog.Logger
	now     func() time.Time
	pending *pendingCap
	// Spend, when set, charges a batch's items beyond the first to the
	// caller's rate limit (the call took one token): nil, or the refusal.
	Spend func(ctx context.Context, n int) error
}

// New returns a Server. Single creates go through batcher (group commit);
// cursorSecret keys the list cursors.
func New(st *store.Store, batcher *store.Batcher, rules Rules, cursorSecret []byte, log *slog.Logger) *Server {
	s := &Server{store: st, single: batcher, rules: rules, cursors: cursor.NewSigner(cursorSecret), log: log, now: time.Now}
	s.pending = newPendingCap(rules.MaxPending, st, func() time.Time { return s.now() })
	return s
}

// limitErr passes a limit's refusal on, and reports a failure to count.
func (s *Server) limitErr(op string, err error) error {
	if status.Code(err) == codes.ResourceExhausted {
		return err
	}
	return s.internal(op+": count scheduled payments", err)
}

// Violations returns what validation finds wrong with req, leaving req as
// it is. The REST layer adds them to the body's decoding errors so that a
// client sees every bad field at once.
func (s *Server) Violations(req *payschedv1.CreateScheduledPaymentRequest) []apierr.Violation {
	return s.rules.Normalize(proto.CloneOf(req), s.now())
}

func actor(ctx context.Context) (string, error) {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Actor == "" {
		return "", auth.Unauthenticated("missing bearer token")
	}
	return p.Actor, nil
}

// tenantOf is whom the caller's payments are scheduled for: the tenant
// the token verified as (auth.Principal.Tenant), never the payer.
func tenantOf(ctx context.Context) string {
	p, _ := auth.FromContext(ctx)
	return p.Tenant
}

// idempotencyKey takes the key from metadata or request_id; both may be
// sent if they agree.
func idempotencyKey(ctx context.Context, requestID string) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var fromMD string
	if vals := md.Get(MetadataIdempotencyKey); len(vals) > 0 {
		fromMD = vals[0]
	}
	key := fromMD
	if key == "" {
		key = requestID
	} else if requestID != "" && requestID != fromMD {
		return "", apierr.Invalid("the Idempotency-Key header and requestId disagree",
			[]apierr.Violation{{Field: "requestId", Description: "must equal the Idempotency-Key header when both are sent"}})
	}
	if key == "" {
		return "", apierr.New(codes.InvalidArgument, apierr.ReasonIdempotencyRequired,
			"an idempotency key is required: send the Idempotency-Key header (gRPC: idempotency-key metadata or request_id)", nil)
	}
	if v := CheckKey(key); v != nil {
		return "", apierr.Invalid("invalid idempotency key", []apierr.Violation{*v})
	}
	return key, nil
}

// fingerprint hashes a normalized request (its private copy, whose
// request_id it clears: the key itself is not part of the body), so a
// replay must carry the same body to be answered from the store.
func fingerprint(req *payschedv1.CreateScheduledPaymentRequest) []byte {
	req.RequestId = ""
	return bodyHash(req)
}

// bodyHash is the SHA-256 of m's deterministic encoding.
func bodyHash(m proto.Message) []byte {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	h := sha256.Sum256(b)
	return h[:]
}

// prepared is one create request after validation.
type prepared struct {
	key        string
	hash       []byte
	violations []apierr.Violation
	item       store.NewPayment
}

func (s *Server) prepare(actorID, key string, req *payschedv1.CreateScheduledPaymentRequest, now time.Time) (prepared, error) {
	req = proto.CloneOf(req)
	vs := s.rules.Normalize(req, now)
	pr := prepared{key: key, hash: fingerprint(req), violations: vs}
	if len(vs) > 0 {
		return pr, nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return pr, fmt.Errorf("new payment id: %w", err)
	}
	created := now.UTC().Truncate(time.Microsecond)
	resp := &payschedv1.CreateScheduledPaymentResponse{Payment: &payschedv1.ScheduledPayment{
		PaymentId:   id.String(),
		Payer:       actorID,
		Payee:       req.GetPayee(),
		Amount:      req.GetAmount(),
		Currency:    req.GetCurrency(),
		DueAt:       req.GetDueAt(),
		Status:      payschedv1.PaymentStatus_PENDING,
		Description: req.GetDescription(),
		Metadata:    req.GetMetadata(),
		CreatedAt:   timestamppb.New(created),
		UpdatedAt:   timestamppb.New(created),
	}}
	stored, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
	if err != nil {
		return pr, fmt.Errorf("encode stored response: %w", err)
	}
	pr.item = store.NewPayment{
		ID: id, Payer: actorID, Payee: req.GetPayee(), Amount: req.GetAmount(), Currency: req.GetCurrency(),
		DueAt: req.GetDueAt().AsTime(), Description: req.GetDescription(), Metadata: req.GetMetadata(),
		CreatedAt: created, IdempotencyKey: key, RequestHash: pr.hash, Response: stored,
	}
	return pr, nil
}

// CreateScheduledPayment implements PaymentsService.
func (s *Server) CreateScheduledPayment(ctx context.Context, req *payschedv1.CreateScheduledPaymentRequest) (*payschedv1.CreateScheduledPaymentResponse, error) {
	actorID, err := actor(ctx)
	if err != nil {
		return nil, err
	}
	key, err := idempotencyKey(ctx, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	pr, err := s.prepare(actorID, key, req, s.now())
	if err != nil {
		return nil, s.internal("create", err)
	}
	pr.item.Tenant = tenantOf(ctx)
	var res store.CreateResult
	if len(pr.violations) > 0 {
		// A request that no longer validates (its dueAt has passed) may still
		// be a replay of one that did: answer it from the store if so.
		r, found, err := s.store.Replay(ctx, actorID, key, pr.hash)
		if err != nil {
			return nil, s.internal("create: replay lookup", err)
		}
		if !found {
			return nil, apierr.Invalid("the request has invalid fields", pr.violations)
		}
		res = r
	} else {
		if err := s.pending.admit(ctx, actorID, 1); err != nil {
			return nil, s.limitErr("create", err)
		}
		r, err := s.single.Create(ctx, pr.item)
		if err != nil {
			return nil, s.internal("create", err)
		}
		res = r
	}
	switch res.Kind {
	case store.KeyReused:
		return nil, keyReused(key)
	case store.Replayed:
		_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderReplayed, "true"))
	}
	out := &payschedv1.CreateScheduledPaymentResponse{}
	if err := proto.Unmarshal(res.Response, out); err != nil {
		return nil, s.internal("create: decode stored response", err)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(HeaderHTTPCode, "201"))
	return out, nil
}

func keyReused(key string) error {
	return apierr.New(codes.AlreadyExists, apierr.ReasonIdempotencyReused,
		"this idempotency key was already used with a different request", map[string]string{"idempotencyKey": key})
}

// BatchCreateScheduledPayments implements PaymentsService.
func (s *Server) BatchCreateScheduledPayments(ctx context.Context, req *payschedv1.BatchCreateScheduledPaymentsRequest) (*payschedv1.BatchCreateScheduledPaymentsResponse, error) {
	actorID, err := actor(ctx)
	if err != nil {
		return nil, err
	}
	n := len(req.GetItems())
	if n == 0 || n > MaxBatchItems {
		return nil, apierr.Invalid("a batch holds 1 to 1000 items",
			[]apierr.Violation{{Field: "items", Description: fmt.Sprintf("must hold 1 to %d items, got %d", MaxBatchItems, n)}})
	}
	if s.Spend != nil {
		// A batch of n is n payments' worth of the actor's rate.
		if err := s.Spend(ctx, n-1); err != nil {
			return nil, err
		}
	}
	now := s.now()
	results := make([]*payschedv1.BatchCreateResult, n)
	var valid []store.NewPayment
	var validIdx []int
	var invalid []prepared
	var invalidIdx []int
	for i, item := range req.GetItems() {
		results[i] = &payschedv1.BatchCreateResult{Index: int32(i)}
		key := item.GetRequestId()
		if key == "" {
			reject(results[i], apierr.ReasonIdempotencyRequired, "requestId (the item's idempotency key) is required", nil)
			continue
		}
		if v := CheckKey(key); v != nil {
			reject(results[i], apierr.ReasonValidation, "invalid idempotency key",
				[]apierr.Violation{{Field: "requestId", Description: v.Description}})
			continue
		}
		pr, err := s.prepare(actorID, key, item, now)
		if err != nil {
			return nil, s.internal("batch create", err)
		}
		pr.item.Tenant = tenantOf(ctx)
		if len(pr.violations) > 0 {
			invalid, invalidIdx = append(invalid, pr), append(invalidIdx, i)
			continue
		}
		valid, validIdx = append(valid, pr.item), append(validIdx, i)
	}
	if err := s.pending.admit(ctx, actorID, len(valid)); err != nil {
		return nil, s.limitErr("batch create", err)
	}
	created, err := s.store.Create(ctx, valid)
	if err != nil {
		return nil, s.internal("batch create", err)
	}
	for j, r := range created {
		s.fill(results[validIdx[j]], r, valid[j].IdempotencyKey)
	}
	for j, pr := range invalid {
		r, found, err := s.store.Replay(ctx, actorID, pr.key, pr.hash)
		if err != nil {
			return nil, s.internal("batch create: replay lookup", err)
		}
		if !found {
			reject(results[invalidIdx[j]], apierr.ReasonValidation, "the item has invalid fields", pr.violations)
			continue
		}
		s.fill(results[invalidIdx[j]], r, pr.key)
	}
	return &payschedv1.BatchCreateScheduledPaymentsResponse{Results: results}, nil
}

func (s *Server) fill(out *payschedv1.BatchCreateResult, r store.CreateResult, key string) {
	if r.Kind == store.KeyReused {
		reject(out, apierr.ReasonIdempotencyReused, "idempotency key "+key+" was already used with a different request", nil)
		return
	}
	resp := &payschedv1.CreateScheduledPaymentResponse{}
	if err := proto.Unmarshal(r.Response, resp); err != nil {
		s.log.Error("batch create: decode stored response", "err", err)
		reject(out, apierr.ReasonInternal, "stored response unreadable", nil)
		return
	}
	out.Payment = resp.GetPayment()
	out.Outcome = payschedv1.BatchCreateResult_OUTCOME_CREATED
	if r.Kind == store.Replayed {
		out.Outcome = payschedv1.BatchCreateResult_OUTCOME_REPLAYED
	}
}

func reject(out *payschedv1.BatchCreateResult, reason, msg string, vs []apierr.Violation) {
	out.Outcome = payschedv1.BatchCreateResult_OUTCOME_REJECTED
	out.Reason = reason
	out.Message = msg
	for _, v := range vs {
		out.FieldViolations = append(out.FieldViolations, &payschedv1.FieldViolation{Field: v.Field, Description: v.Description})
	}
}

// target is the caller and the payment a Get or Cancel names.
func target(ctx context.Context, paymentID string) (string, uuid.UUID, error) {
	return targetOf(ctx, "paymentId", paymentID)
}

// targetOf is the caller and the resource id a request names in field.
func targetOf(ctx context.Context, field, id string) (string, uuid.UUID, error) {
	actorID, err := actor(ctx)
	if err != nil {
		return "", uuid.Nil, err
	}
	parsed, err := apierr.ParseID(field, id)
	return actorID, parsed, err
}

// pageSize is a list request's page size: DefaultPageSize for 0, at most
// MaxPageSize, a negative one refused.
func pageSize(n int32) (int, error) {
	switch size := int(n); {
	case size < 0:
		return 0, apierr.Invalid("pageSize must not be negative",
			[]apierr.Violation{{Field: "pageSize", Description: "must be between 1 and 500 (0 means the default, 50)"}})
	case size == 0:
		return DefaultPageSize, nil
	default:
		return min(size, MaxPageSize), nil
	}
}

// keyset is how to read one page of a payer's list, newest first, behind
// a cursor signed for scope: reused elsewhere (another payer, another
// filter) it fails verification like a tampered one.
type keyset struct {
	cursors  *cursor.Signer
	log      *slog.Logger
	token    string // the request's cursor: "" for the first page
	scope    string
	size     int
	hint, op string // how to pass a cursor back; what the read is, for its failure
}

// readPage reads the page k says, as conv makes each row (never nil: an
// empty page is an empty list), and the cursor to the next page: read
// answers up to limit rows before a position (0: from the newest), seq a
// row's position.
func readPage[T, P any](k keyset, read func(before int64, limit int) ([]T, error), seq func(T) int64, conv func(*T) P) ([]P, string, error) {
	var before int64
	if k.token != "" {
		var err error
		before, err = k.cursors.Decode(k.token, k.scope)
		if err != nil || before <= 0 {
			return nil, "", apierr.New(codes.InvalidArgument, apierr.ReasonInvalidCursor, "the cursor is invalid: "+k.hint, nil)
		}
	}
	rows, err := read(before, k.size+1)
	if err != nil {
		return nil, "", apierr.FromFailure(k.log, k.op, err)
	}
	var next string
	if len(rows) > k.size {
		rows = rows[:k.size]
		next = k.cursors.Encode(seq(rows[k.size-1]), k.scope)
	}
	out := make([]P, 0, len(rows))
	for i := range rows {
		out = append(out, conv(&rows[i]))
	}
	return out, next, nil
}

func notFound() error {
	return apierr.New(codes.NotFound, apierr.ReasonNotFound, "payment not found", nil)
}

// GetScheduledPayment implements PaymentsService.
func (s *Server) GetScheduledPayment(ctx context.Context, req *payschedv1.GetScheduledPaymentRequest) (*payschedv1.GetScheduledPaymentResponse, error) {
	actorID, id, err := target(ctx, req.GetPaymentId())
	if err != nil {
		return nil, err
	}
	p, err := s.store.Get(ctx, actorID, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound()
	}
	if err != nil {
		return nil, s.internal("get", err)
	}
	out := toPayerProto(p)
	if out.Attempts == nil {
		out.Attempts = []*payschedv1.PaymentAttempt{}
	}
	return &payschedv1.GetScheduledPaymentResponse{Payment: out}, nil
}

// ListScheduledPayments implements PaymentsService.
func (s *Server) ListScheduledPayments(ctx context.Context, req *payschedv1.ListScheduledPaymentsRequest) (*payschedv1.ListScheduledPaymentsResponse, error) {
	actorID, err := actor(ctx)
	if err != nil {
		return nil, err
	}
	status, ok := statusFromProto(req.GetStatus())
	if !ok {
		return nil, apierr.Invalid("unknown status filter",
			[]apierr.Violation{{Field: "status", Description: "must be one of PENDING, PROCESSING, COMPLETED, FAILED, CANCELLED, DEAD_LETTERED"}})
	}
	size, err := pageSize(req.GetPageSize())
	if err != nil {
		return nil, err
	}
	// The cursor is bound to the actor and the filter.
	ps, next, err := readPage(keyset{cursors: s.cursors, log: s.log, token: req.GetCursor(), scope: actorID + "\x00" + string(status),
		size: size, hint: "pass back next_cursor unchanged, with the same filter", op: "list"},
		func(before int64, limit int) ([]payment.Payment, error) {
			return s.store.List(ctx, actorID, status, before, limit)
		},
		func(p payment.Payment) int64 { return p.Seq }, toPayerProto)
	if err != nil {
		return nil, err
	}
	return &payschedv1.ListScheduledPaymentsResponse{Payments: ps, NextCursor: next}, nil
}

// CancelScheduledPayment implements PaymentsService.
func (s *Server) CancelScheduledPayment(ctx context.Context, req *payschedv1.CancelScheduledPaymentRequest) (*payschedv1.CancelScheduledPaymentResponse, error) {
	actorID, id, err := target(ctx, req.GetPaymentId())
	if err != nil {
		return nil, err
	}
	p, err := s.store.Cancel(ctx, actorID, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, notFound()
	case errors.Is(err, store.ErrAlreadyProcessing) && p.Status == payment.Held:
		// Not the payer's to cancel while an operator holds it.
		return nil, apierr.New(codes.FailedPrecondition, "HELD",
			"an operator holds this payment: it is not executed until released, and only an operator cancels it meanwhile",
			map[string]string{"status": string(p.Status), "paymentId": id.String()})
	case errors.Is(err, store.ErrAlreadyProcessing):
		return nil, apierr.New(codes.Aborted, apierr.ReasonAlreadyProcessing,
			"the payment can no longer be cancelled: it is "+strings.ToLower(string(p.Status)),
			map[string]string{"status": string(p.Status), "paymentId": id.String()})
	case err != nil:
		return nil, s.internal("cancel", err)
	}
	return &payschedv1.CancelScheduledPaymentResponse{Payment: toPayerProto(p)}, nil
}

// internal logs the cause of a failure of op and returns the client's error.
func (s *Server) internal(op string, err error) error { return apierr.FromFailure(s.log, op, err) }
