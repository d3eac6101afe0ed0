// Package admin implements paysched.v1.AdminService: dead letters
// (list, re-drive, resolve), operators' moves of open payments, tenant
// limits, webhook endpoints and reconciliation runs. Every call requires
// the admin claim; every move is a request (package approval) that the
// policy lets one admin take, or that waits for a second admin's
// approval, and is applied through a fenced transition that records who,
// when, what and the previous status.
package admin

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/payments"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/pkg/store"
)

// Server implements AdminService.
type Server struct {
	payschedv1.UnimplementedAdminServiceServer
	db     *pgxpool.Pool
	store  *store.Store
	runner *reconcile.Runner
	prober Prober
	log    *slog.Logger
	// LoopbackWebhooks accepts http:// endpoints on loopback
	// (development: a local receiver).
	LoopbackWebhooks bool
	// HooksDB is the webhooks' database (nil: the schedule's).
	HooksDB pgdb.DB
	// Requests are the operators' requests every guarded method goes
	// through (New: the strict policy).
	Requests *approval.Requests
	// Process names this replica as the runner of the requests it applies
	// at once.
	Process string
}

// Prober asks the gateway whether it holds a charge for a payment, and
// cancels an undecided one (gateway.Charger).
type Prober interface {
	Probe(ctx context.Context, p gateway.ChargeInput) gateway.Result
	Cancel(ctx context.Context, p gateway.ChargeInput, chargeID string) gateway.Result
}

// New returns the admin service. runner and prober may be nil (no gateway
// configured): triggering a run, re-driving and resolving then answer
// FAILED_PRECONDITION, for each must ask the gateway first.
func New(db *pgxpool.Pool, runner *reconcile.Runner, prober Prober, log *slog.Logger) *Server {
	reqs, err := approval.New(db, approval.Strict(), log)
	if err != nil {
		panic(err) // the strict policy is valid (TestStrictPolicyIsValid)
	}
	return &Server{db: db, store: store.NewStore(db), runner: runner, prober: prober, log: log, Requests: reqs, Process: "admin-api"}
}

// admin returns the calling operator, or the error to answer.
func admin(ctx context.Context) (string, error) {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Actor == "" {
		return "", auth.Unauthenticated("missing bearer token")
	}
	if !p.Admin {
		return "", apierr.New(codes.PermissionDenied, apierr.ReasonPermissionDenied, "the admin claim is required", nil)
	}
	return p.Actor, nil
}

func invalid(field, desc string) error {
	return apierr.Invalid(field+" is invalid", []apierr.Violation{{Field: field, Description: desc}})
}

func pageSize(n int32, def, maxN int) (int, error) {
	switch {
	case n == 0:
		return def, nil
	case n < 0 || int(n) > maxN:
		return 0, invalid("pageSize", fmt.Sprintf("must be between 1 and %d", maxN))
	}
	return int(n), nil
}

// ListDeadLetters implements AdminService.
func (s *Server) ListDeadLetters(ctx context.Context, req *payschedv1.ListDeadLettersRequest) (*payschedv1.ListDeadLettersResponse, error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 50, 500)
	if err != nil {
		return nil, err
	}
	afterDue, afterID := time.Unix(0, 0).UTC(), uuid.Nil
	if tok := req.GetPageToken(); tok != "" {
		if afterDue, afterID, err = decodeDeadToken(tok); err != nil {
			return nil, apierr.New(codes.InvalidArgument, apierr.ReasonInvalidCursor, "pageToken is not one this API issued", nil)
		}
	}
	ds, err := s.store.DeadLetters(ctx, afterDue, afterID, size+1)
	if err != nil {
		return nil, s.internal("list dead letters", err)
	}
	out := &payschedv1.ListDeadLettersResponse{}
	if len(ds) > size {
		ds = ds[:size]
		last := ds[size-1]
		out.NextPageToken = encodeDeadToken(last.DueAt, last.ID)
	}
	for i := range ds {
		out.DeadLetters = append(out.DeadLetters, &payschedv1.DeadLetter{
			Payment: payments.ToProto(&ds[i].Payment), Reason: ds[i].Reason, Probes: ds[i].Probes})
	}
	return out, nil
}

// Dead-letter page tokens are plain (due time, id) positions: they reveal
// nothing an admin cannot list anyway.
func encodeDeadToken(due time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(due.UnixMicro(), 10) + "|" + id.String()))
}

func decodeDeadToken(tok string) (time.Time, uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	us, id, ok := strings.Cut(string(b), "|")
	if !ok {
		return time.Time{}, uuid.Nil, errors.New("malformed")
	}
	n, err := strconv.ParseInt(us, 10, 64)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	u, err := uuid.Parse(id)
	return time.UnixMicro(n).UTC(), u, err
}

// operatorOn checks an operator's move on one payment before it reads
// the payment: the admin claim (who), the payment's id and the note.
func operatorOn(ctx context.Context, paymentID, note string, noteRequired bool) (string, uuid.UUID, error) {
	who, err := admin(ctx)
	if err != nil {
		return "", uuid.Nil, err
	}
	id, err := apierr.ParseID("paymentId", paymentID)
	if err != nil {
		return "", uuid.Nil, err
	}
	if err := checkNote(note, noteRequired); err != nil {
		return "", uuid.Nil, err
	}
	return who, id, nil
}

func checkNote(note string, required bool) error {
	switch {
	case required && strings.TrimSpace(note) == "":
		return invalid("note", "is required: say why")
	case !utf8.ValidString(note) || utf8.RuneCountInString(note) > 500:
		return invalid("note", "must be valid UTF-8, at most 500 characters")
	case !payments.Printable(note, true):
		// The note is read by other operators and in the audit log: no
		// control, format or invisible characters that hide or spoof text.
		return invalid("note", "must not contain control, format, separator or invisible characters")
	}
	return nil
}

// pinned is a payment as a console request pinned it when it was
// requested: what its approver approved. Nil: the payment as it is now.
// Only a claim changes the attempt, and a payment comes back to a status
// it left only through a claim, so (status, attempt) says it is unchanged.
type pinned struct {
	// status "": any the action may leave (a reschedule pins the attempt
	// only: a payment held and released since is the same payment).
	status payment.Status
	// attempt < 0: any (a request made before attempts were pinned).
	attempt int32
}

// holds reports whether p is still as pinned.
func (pin *pinned) holds(p *payment.Payment) bool {
	return (pin.status == "" || p.Status == pin.status) && (pin.attempt < 0 || p.Attempt == pin.attempt)
}

func changedSince(pin *pinned, p *payment.Payment) error {
	return apierr.New(codes.FailedPrecondition, apierr.ReasonChangedSinceRequest,
		fmt.Sprintf("the payment changed since the request (it was %s at attempt %d, it is %s at attempt %d): skipped, not acted on",
			pin.status, pin.attempt, p.Status, p.Attempt),
		map[string]string{"status": string(p.Status), "attempt": strconv.Itoa(int(p.Attempt))})
}

// move applies one operator transition: it reads the payment, asks the
// gateway what it holds for it (decide turns the answer into the move, or
// a refusal), and makes the move fenced on the attempt it read, so a claim
// in between (which may charge) makes it miss. With a pin, the payment
// must still be as pinned (status and attempt) when read and when moved.
func (s *Server) move(ctx context.Context, paymentID, note string, noteRequired bool, from []payment.Status, m store.OutOfBandMove,
	pin *pinned, decide func(p *payment.Payment, r gateway.Result, m *store.OutOfBandMove) error) (*payschedv1.ScheduledPayment, payschedv1.PaymentStatus, error) {
	who, id, err := operatorOn(ctx, paymentID, note, noteRequired)
	if err != nil {
		return nil, 0, err
	}
	p, err := s.readPayment(ctx, id, pin)
	if err != nil {
		return nil, 0, err
	}
	if pin != nil {
		// The pin's status alone is one a move may leave: a payment moved
		// since (a re-drive, a resolve) is not chased into its new status.
		from, m.From = []payment.Status{pin.status}, pin.status
	}
	if err := atRest(p, from); err != nil {
		return nil, 0, err
	}
	if s.prober == nil {
		return nil, 0, apierr.New(codes.FailedPrecondition, "GATEWAY_NOT_CONFIGURED",
			"an operator moves a payment only after asking the gateway whether it was charged, and this service has no gateway configured", nil)
	}
	r := s.prober.Probe(ctx, gateway.ChargeInput{ID: id.String(), Payer: p.Payer, Payee: p.Payee, Currency: p.Currency, Amount: p.Amount, DueAt: p.DueAt,
		SentBy: p.RequestsSentBy})
	if err := decide(p, r, &m); err != nil {
		return nil, 0, err
	}
	m.ID, m.By, m.Actor, m.Reason, m.Fenced, m.Attempt = id, payment.Operator, "admin:"+who, note, true, p.Attempt
	m.Request = approval.RequestOf(ctx)
	prev, err := store.Apply(ctx, s.db, m)
	if errors.Is(err, store.ErrNotMoved) {
		now, err := s.readPayment(ctx, id, nil)
		if err != nil {
			return nil, 0, err
		}
		return nil, 0, missed(pin, now, "while the gateway was asked")
	}
	if err != nil {
		return nil, 0, s.internal("move payment", err)
	}
	out, err := s.store.GetAny(ctx, id)
	if err != nil {
		return nil, 0, s.internal("read payment", err)
	}
	s.log.Info("admin action", "actor", who, "action", m.Action, "payment", id, "from", prev, "to", m.To, "note", note)
	return payments.ToProto(out), payments.StatusToProto(prev), nil
}

// atRest refuses p unless its status is one of from.
func atRest(p *payment.Payment, from []payment.Status) error {
	for _, st := range from {
		if p.Status == st {
			return nil
		}
	}
	names := make([]string, len(from))
	for i, st := range from {
		names[i] = string(st)
	}
	reason := "NOT_DEAD_LETTERED"
	if len(from) > 1 {
		reason = "NOT_AT_REST"
	}
	return apierr.New(codes.FailedPrecondition, reason,
		"only a payment that is "+strings.Join(names, " or ")+" can be moved so; this one is "+string(p.Status),
		map[string]string{"status": string(p.Status)})
}

// notCharged is the rule for an operator's move to a status that says
// "no charge" (re-drive, resolve): a dead letter may have been charged
// (its answer lost, its lease expired), and the gateway may have forgotten
// the key (Stripe: after 24 h), so a re-drive could charge twice and a
// resolve to FAILED could contradict the books. Only a gateway that proves
// it holds no charge (a strongly consistent read), or declined the one it
// holds, lets the move through. Nothing charges a DEAD_LETTERED payment
// meanwhile, and a re-drive still sets probe_first, so the executor asks
// again before it charges.
func notCharged(_ *payment.Payment, r gateway.Result, _ *store.OutOfBandMove) error {
	switch {
	case r.Found && r.Outcome == payment.Succeeded:
		return alreadyCharged(r.Ref)
	case r.Mismatch:
		return apierr.New(codes.FailedPrecondition, "GATEWAY_MISMATCH", r.Error, map[string]string{"chargeId": r.Ref})
	case r.Found && r.Outcome == payment.Declined, r.Absent:
		return nil
	case r.Found:
		return apierr.New(codes.FailedPrecondition, "CHARGE_UNDECIDED",
			"the gateway holds charge "+r.Ref+" undecided (waiting for the customer's authentication, or processing): cancel the payment instead, which cancels that charge first",
			map[string]string{"chargeId": r.Ref})
	}
	return unproven(r)
}

func alreadyCharged(ref string) error {
	return apierr.New(codes.FailedPrecondition, "ALREADY_CHARGED",
		"the gateway holds charge "+ref+" for this payment: it was charged, so it is not moved (the reconciler completes it)",
		map[string]string{"chargeId": ref})
}

// unproven is the refusal when the gateway could not say, or could not
// prove, that it holds no charge.
func unproven(r gateway.Result) error {
	if !r.ProvableAt.IsZero() {
		// Retryable as it is, once the time in the detail has passed.
		return apierr.New(codes.Unavailable, "ABSENCE_TOO_SOON",
			"the gateway holds no charge for this payment yet, but its last request may still be made there; try again after "+
				r.ProvableAt.UTC().Format(time.RFC3339)+": "+r.Error,
			map[string]string{"provableAt": r.ProvableAt.UTC().Format(time.RFC3339)})
	}
	if !r.Unhealthy && !r.Found {
		return apierr.New(codes.Unavailable, "ABSENCE_UNPROVEN",
			"the gateway found no charge for this payment but could not prove it holds none (its index may lag recent charges); try again later: "+r.Error, nil)
	}
	return apierr.New(codes.Unavailable, "GATEWAY_UNAVAILABLE",
		"could not learn from the gateway whether this payment was charged; try again: "+r.Error, nil)
}

// RedrivePayment implements AdminService.
func (s *Server) RedrivePayment(ctx context.Context, req *payschedv1.RedrivePaymentRequest) (*payschedv1.RedrivePaymentResponse, error) {
	a, err := s.guard(ctx, ask{action: "REDRIVE", paymentID: req.GetPaymentId(), note: req.GetNote()})
	if err != nil {
		return nil, err
	}
	return &payschedv1.RedrivePaymentResponse{Payment: a.payment, PreviousStatus: a.prev, Request: a.request}, nil
}

func (s *Server) redrive(ctx context.Context, req *payschedv1.RedrivePaymentRequest, pin *pinned) (*payschedv1.RedrivePaymentResponse, error) {
	p, prev, err := s.move(ctx, req.GetPaymentId(), req.GetNote(), false, []payment.Status{payment.DeadLettered},
		store.OutOfBandMove{To: payment.Pending, Redrive: true, Action: "REDRIVE"}, pin, notCharged)
	if err != nil {
		return nil, err
	}
	return &payschedv1.RedrivePaymentResponse{Payment: p, PreviousStatus: prev}, nil
}

// ResolvePayment implements AdminService.
func (s *Server) ResolvePayment(ctx context.Context, req *payschedv1.ResolvePaymentRequest) (*payschedv1.ResolvePaymentResponse, error) {
	a, err := s.guard(ctx, ask{action: "RESOLVE", paymentID: req.GetPaymentId(), note: req.GetNote(), noteRequired: true})
	if err != nil {
		return nil, err
	}
	return &payschedv1.ResolvePaymentResponse{Payment: a.payment, PreviousStatus: a.prev, Request: a.request}, nil
}

func (s *Server) resolve(ctx context.Context, req *payschedv1.ResolvePaymentRequest, pin *pinned) (*payschedv1.ResolvePaymentResponse, error) {
	p, prev, err := s.move(ctx, req.GetPaymentId(), req.GetNote(), true, []payment.Status{payment.DeadLettered},
		store.OutOfBandMove{To: payment.Failed, Action: "RESOLVE", FailReason: payment.FailResolved,
			LastError: "resolved by an operator: " + req.GetNote()}, pin, notCharged)
	if err != nil {
		return nil, err
	}
	return &payschedv1.ResolvePaymentResponse{Payment: p, PreviousStatus: prev}, nil
}

// CancelPayment implements AdminService: a payment at rest is cancelled
// once no charge of it can land. An undecided charge (waiting for the
// customer's authentication, or processing) is cancelled at the gateway
// first; a declined one, or a proven absence, lets it through; a
// succeeded one refuses. A PENDING payment is fenced on the attempt read
// before asking, so a claim in between makes the move miss.
func (s *Server) CancelPayment(ctx context.Context, req *payschedv1.CancelPaymentRequest) (*payschedv1.CancelPaymentResponse, error) {
	a, err := s.guard(ctx, ask{action: "CANCEL", paymentID: req.GetPaymentId(), note: req.GetNote(), noteRequired: true})
	if err != nil {
		return nil, err
	}
	return &payschedv1.CancelPaymentResponse{Payment: a.payment, PreviousStatus: a.prev, CancelledChargeId: a.cancelled, Request: a.request}, nil
}

func (s *Server) cancel(ctx context.Context, req *payschedv1.CancelPaymentRequest, pin *pinned) (*payschedv1.CancelPaymentResponse, error) {
	var cancelled string
	p, prev, err := s.move(ctx, req.GetPaymentId(), req.GetNote(), true, payment.From(payment.Cancelled, payment.Operator),
		store.OutOfBandMove{To: payment.Cancelled, Action: "CANCEL", LastError: "cancelled by an operator: " + req.GetNote()}, pin,
		func(p *payment.Payment, r gateway.Result, _ *store.OutOfBandMove) error {
			if r.Found && r.Outcome == payment.Ambiguous && !r.Mismatch {
				// Undecided at the gateway: cancel it there first, and read
				// what it is then.
				r = s.prober.Cancel(ctx, gateway.ChargeInput{ID: p.ID.String(), Payer: p.Payer, Payee: p.Payee,
					Currency: p.Currency, Amount: p.Amount, DueAt: p.DueAt}, r.Ref)
				switch {
				case r.Outcome == payment.Declined:
					cancelled = r.Ref
					noteCancelled(ctx, r.Ref)
					return nil
				case !r.Found:
					return apierr.New(codes.Unavailable, "GATEWAY_CANCEL_FAILED", "the gateway did not cancel the charge: "+r.Error,
						map[string]string{"chargeId": r.Ref})
				case r.Outcome == payment.Ambiguous && !r.Mismatch:
					return apierr.New(codes.FailedPrecondition, "CHARGE_NOT_CANCELLABLE",
						"the gateway keeps charge "+r.Ref+" undecided and would not cancel it: "+r.Error, map[string]string{"chargeId": r.Ref})
				}
			}
			return notCharged(p, r, nil)
		})
	if err != nil {
		return nil, err
	}
	return &payschedv1.CancelPaymentResponse{Payment: p, PreviousStatus: prev, CancelledChargeId: cancelled}, nil
}

// HoldPayment implements AdminService: a PENDING payment is held, fenced
// on the attempt read, so a claim in between makes the hold miss (the
// payment is being executed: MOVED_MEANWHILE). Nothing is asked of the
// gateway: a hold moves no money, and the payment keeps probe_first.
func (s *Server) HoldPayment(ctx context.Context, req *payschedv1.HoldPaymentRequest) (*payschedv1.HoldPaymentResponse, error) {
	a, err := s.guard(ctx, ask{action: "HOLD", paymentID: req.GetPaymentId(), note: req.GetNote(), noteRequired: true})
	if err != nil {
		return nil, err
	}
	return &payschedv1.HoldPaymentResponse{Payment: a.payment, Request: a.request}, nil
}

// ReleasePayment implements AdminService: a HELD payment goes back to
// PENDING, its run time as it was (due at once if that has passed).
func (s *Server) ReleasePayment(ctx context.Context, req *payschedv1.ReleasePaymentRequest) (*payschedv1.ReleasePaymentResponse, error) {
	a, err := s.guard(ctx, ask{action: "RELEASE", paymentID: req.GetPaymentId(), note: req.GetNote()})
	if err != nil {
		return nil, err
	}
	return &payschedv1.ReleasePaymentResponse{Payment: a.payment, Request: a.request}, nil
}

// hold makes an operator's hold or release: from one status to another,
// fenced on the attempt read (and, with a pin, only while the payment is
// as pinned).
func (s *Server) hold(ctx context.Context, paymentID, note string, noteRequired bool, from, to payment.Status, action string,
	pin *pinned) (*payschedv1.ScheduledPayment, error) {
	who, id, err := operatorOn(ctx, paymentID, note, noteRequired)
	if err != nil {
		return nil, err
	}
	p, err := s.readPayment(ctx, id, pin)
	if err != nil {
		return nil, err
	}
	if p.Status != from {
		return nil, apierr.New(codes.FailedPrecondition, "NOT_"+string(from),
			"only a "+string(from)+" payment can be moved so; this one is "+string(p.Status), map[string]string{"status": string(p.Status)})
	}
	m := store.OutOfBandMove{ID: id, By: payment.Operator, To: to, From: from, Fenced: true, Attempt: p.Attempt,
		Actor: "admin:" + who, Action: action, Reason: note, Request: approval.RequestOf(ctx)}
	_, err = store.Apply(ctx, s.db, m)
	out, err := s.afterMove(ctx, id, pin, "move payment", err)
	if err != nil {
		return nil, err
	}
	s.log.Info("admin action", "actor", who, "action", action, "payment", id, "from", from, "to", to, "note", note)
	return payments.ToProto(out), nil
}

// ListReconciliationRuns implements AdminService.
func (s *Server) ListReconciliationRuns(ctx context.Context, req *payschedv1.ListReconciliationRunsRequest) (*payschedv1.ListReconciliationRunsResponse, error) {
	if _, err := admin(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 20, 100)
	if err != nil {
		return nil, err
	}
	var day time.Time
	if req.GetDay() != "" {
		if day, err = time.Parse(time.DateOnly, req.GetDay()); err != nil {
			return nil, invalid("day", "must be YYYY-MM-DD")
		}
	}
	var before int64
	if tok := req.GetPageToken(); tok != "" {
		if before, err = strconv.ParseInt(tok, 10, 64); err != nil || before <= 0 {
			return nil, apierr.New(codes.InvalidArgument, apierr.ReasonInvalidCursor, "pageToken is not one this API issued", nil)
		}
	}
	runs, err := reconcile.Runs(ctx, s.db, day, before, size+1)
	if err != nil {
		return nil, s.internal("list runs", err)
	}
	out := &payschedv1.ListReconciliationRunsResponse{}
	if len(runs) > size {
		runs = runs[:size]
		out.NextPageToken = strconv.FormatInt(runs[size-1].ID, 10)
	}
	for _, r := range runs {
		out.Runs = append(out.Runs, RunToProto(r))
	}
	return out, nil
}

// TriggerReconciliationRun implements AdminService. It runs the day now
// and answers when the run is recorded; a run that fails (the gateway is
// unreachable) is returned too, with state FAILED and its error.
func (s *Server) TriggerReconciliationRun(ctx context.Context, req *payschedv1.TriggerReconciliationRunRequest) (*payschedv1.TriggerReconciliationRunResponse, error) {
	who, err := admin(ctx)
	if err != nil {
		return nil, err
	}
	day := reconcile.Day(time.Now()).AddDate(0, 0, -1)
	if req.GetDay() != "" {
		if day, err = time.Parse(time.DateOnly, req.GetDay()); err != nil {
			return nil, invalid("day", "must be YYYY-MM-DD")
		}
	}
	if day.After(time.Now()) {
		return nil, invalid("day", "must not be in the future")
	}
	done, err := s.startRun(ctx, day, "admin:"+who)
	if err != nil {
		return nil, err
	}
	// The run outlives an impatient client: it is one transaction, and
	// cutting it short would only waste it.
	res := <-done
	if res.Run == nil {
		return nil, s.internal("reconcile", res.Err)
	}
	return &payschedv1.TriggerReconciliationRunResponse{Run: RunToProto(res.Run)}, nil
}

// startRun starts a run of day by who, unless one is in flight
// (FAILED_PRECONDITION RUN_IN_PROGRESS).
func (s *Server) startRun(ctx context.Context, day time.Time, by string) (<-chan reconcile.Result, error) {
	if s.runner == nil {
		return nil, apierr.New(codes.FailedPrecondition, "RECONCILER_NOT_CONFIGURED", "this admin-api has no gateway address to reconcile against", nil)
	}
	done, err := s.runner.Start(ctx, day, by)
	switch {
	case errors.Is(err, reconcile.ErrRunInProgress):
		return nil, apierr.New(codes.FailedPrecondition, apierr.ReasonRunInProgress,
			"a reconciliation run of "+reconcile.Day(day).Format(time.DateOnly)+" is already running: wait for it (its row shows RUNNING)",
			map[string]string{"day": reconcile.Day(day).Format(time.DateOnly)})
	case err != nil:
		return nil, s.internal("start reconciliation", err)
	}
	return done, nil
}

// RunToProto is the API form of a run.
func RunToProto(r *reconcile.Run) *payschedv1.ReconciliationRun {
	out := &payschedv1.ReconciliationRun{
		RunId: r.ID, Day: r.Day.Format(time.DateOnly), TriggeredBy: r.TriggeredBy, State: string(r.State),
		StartedAt: timestamppb.New(r.StartedAt), Charges: r.Charges, Payments: r.Payments,
		Repaired: int32(r.Repaired), Mismatches: int32(r.Mismatches), Error: r.Error,
	}
	if !r.FinishedAt.IsZero() {
		out.FinishedAt = timestamppb.New(r.FinishedAt)
	}
	for _, it := range r.Items {
		out.Items = append(out.Items, &payschedv1.ReconciliationItem{Kind: it.Kind, Severity: it.Severity,
			PaymentId: it.PaymentID, Reference: it.Reference, ChargeIds: it.ChargeIDs, Detail: it.Detail})
	}
	return out
}

func (s *Server) internal(op string, err error) error {
	return apierr.FromFailure(s.log, "admin: "+op, err)
}

// readPayment reads the payment an operator acts on; with a pin, only
// while it is still as pinned.
func (s *Server) readPayment(ctx context.Context, id uuid.UUID, pin *pinned) (*payment.Payment, error) {
	p, err := s.store.GetAny(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.New(codes.NotFound, apierr.ReasonNotFound, "payment not found", nil)
	}
	if err != nil {
		return nil, s.internal("read payment", err)
	}
	if pin != nil && !pin.holds(p) {
		return nil, changedSince(pin, p)
	}
	return p, nil
}

// afterMove reads the payment as a fenced move left it; err is the
// move's (op names it), and a move that missed is told apart: the
// payment changed since its pin, or moved meanwhile.
func (s *Server) afterMove(ctx context.Context, id uuid.UUID, pin *pinned, op string, err error) (*payment.Payment, error) {
	if errors.Is(err, store.ErrNotMoved) {
		now, gerr := s.store.GetAny(ctx, id)
		if gerr != nil {
			return nil, s.internal("read payment", gerr)
		}
		return nil, missed(pin, now, "meanwhile")
	}
	if err != nil {
		return nil, s.internal(op, err)
	}
	out, err := s.store.GetAny(ctx, id)
	if err != nil {
		return nil, s.internal("read payment", err)
	}
	return out, nil
}

// missed is the answer when a fenced move missed the payment, now as now
// says: it changed since the pin, or (no pin) moved when.
func missed(pin *pinned, now *payment.Payment, when string) error {
	if pin != nil {
		return changedSince(pin, now)
	}
	return movedMeanwhile(when, now)
}

// movedMeanwhile is the answer when a fenced move missed: the payment
// moved (when: "meanwhile", or while the gateway was asked) and is now as
// now says.
func movedMeanwhile(when string, now *payment.Payment) error {
	return apierr.New(codes.Aborted, "MOVED_MEANWHILE",
		"the payment moved "+when+" (it is "+string(now.Status)+", attempt "+strconv.Itoa(int(now.Attempt))+"): look again",
		map[string]string{"status": string(now.Status)})
}
