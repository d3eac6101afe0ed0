// Package payment is the payment's state machine: the statuses a payment
// moves through, the outcomes of its gateway attempts, why one is parked as
// a dead letter, who may move it from where to where (Moves), and the retry
// budget. Every other package names these with the types here, never with
// string literals; pkg/store holds the SQL that makes each move.
package payment

import (
	"time"

	"github.com/google/uuid"
)

// Status is a payment's state (docs/DESIGN.md, "State machine").
type Status string

// The statuses, spelled as stored and as the API's JSON reads them.
const (
	Pending      Status = "PENDING"
	Processing   Status = "PROCESSING"
	Completed    Status = "COMPLETED"
	Failed       Status = "FAILED"
	Cancelled    Status = "CANCELLED"
	DeadLettered Status = "DEAD_LETTERED"
	// Held is a PENDING payment an operator stopped: the sweepers skip it
	// until an operator releases it (back to PENDING) or cancels it.
	Held Status = "HELD"
)

// Statuses lists every status, in the order of the state diagram.
var Statuses = []Status{Pending, Held, Processing, Completed, Failed, Cancelled, DeadLettered}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reports whether the engine is done with a payment in s: only the
// reconciler's repair moves it again (gateway truth wins).
func (s Status) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

// AtRest reports whether no engine process will move a payment in s on its
// own: terminal, parked as a dead letter for an operator or the resolver,
// or held by an operator. Notifications announce the moves into these
// statuses.
func (s Status) AtRest() bool { return s.Terminal() || s == DeadLettered || s == Held }

// Open reports whether the engine still has work to do on a payment in s.
func (s Status) Open() bool { return s == Pending || s == Processing }

// AttemptOutcome is what one gateway attempt learned, as stored in
// payment_attempts.outcome.
type AttemptOutcome string

// The attempt outcomes.
const (
	// Succeeded: the gateway charged it.
	Succeeded AttemptOutcome = "SUCCEEDED"
	// Declined: the gateway refused it for good.
	Declined AttemptOutcome = "DECLINED"
	// Retryable: the gateway did not charge it; try again later.
	Retryable AttemptOutcome = "RETRYABLE"
	// Ambiguous: no definitive answer; the gateway may have charged it.
	Ambiguous AttemptOutcome = "AMBIGUOUS"
	// Abandoned: the attempt's lease expired before its executor recorded
	// an outcome; it may have reached the gateway.
	Abandoned AttemptOutcome = "ABANDONED"
	// KeyConflict: the gateway holds a different charge under the
	// payment's key (FAILED_PRECONDITION). Never a success: an operator
	// must look.
	KeyConflict AttemptOutcome = "KEY_CONFLICT"
)

// Definitive reports whether the gateway's answer settles the payment.
func (o AttemptOutcome) Definitive() bool { return o == Succeeded || o == Declined }

// DeadReason says why a payment was dead-lettered.
type DeadReason string

// The dead-letter reasons.
const (
	// RetriesExhausted: every retry of the budget ended without a charge.
	RetriesExhausted DeadReason = "RETRIES_EXHAUSTED"
	// AmbiguousUnresolved: the budget ran out while the gateway may have
	// charged it; the resolver keeps asking the gateway.
	AmbiguousUnresolved DeadReason = "AMBIGUOUS_UNRESOLVED"
	// KeyConflicted: the gateway answered that the payment's key names a
	// charge with other parameters.
	KeyConflicted DeadReason = "KEY_CONFLICT"
	// LeaseTooShort: the payment's claims were released untouched, again
	// and again, because each lease ended before a call could fit in it: a
	// sweeper's --lease is shorter than its executors need. Retrying would
	// only loop; an operator fixes the lease and re-drives.
	LeaseTooShort DeadReason = "LEASE_TOO_SHORT"
	// OutcomeUnrecordable: the executor could not write what the gateway
	// answered (the row was refused even on its own, with its strings
	// cleaned). It may have been charged: re-drive and resolve ask first.
	OutcomeUnrecordable DeadReason = "OUTCOME_UNRECORDABLE"
)

// DeadReasons are every dead-letter reason, for lists and filters.
var DeadReasons = []DeadReason{RetriesExhausted, AmbiguousUnresolved, KeyConflicted, LeaseTooShort, OutcomeUnrecordable}

// FailReason says why a payment ended FAILED: a stable code, for payers
// and notifications, beside the gateway's own words (last_error).
type FailReason string

// The failure reasons.
const (
	// FailDeclined: the gateway declined the charge.
	FailDeclined FailReason = "DECLINED"
	// FailAuthenticationRequired: the charge waited for the customer to
	// authenticate (3-D Secure) past the bound, and was cancelled at the
	// gateway: nobody authenticates an off-session payment.
	FailAuthenticationRequired FailReason = "AUTHENTICATION_REQUIRED"
	// FailPSPTimeout: the gateway kept the charge processing past the
	// bound, and it was cancelled there.
	FailPSPTimeout FailReason = "PSP_TIMEOUT"
	// FailResolved: an operator resolved a dead letter the gateway holds no
	// charge for as failed.
	FailResolved FailReason = "RESOLVED_BY_OPERATOR"
)

// FailReasons are every failure reason, for lists and filters.
var FailReasons = []FailReason{FailDeclined, FailAuthenticationRequired, FailPSPTimeout, FailResolved}

// Payment is one row of payments, as the API shows it.
type Payment struct {
	ID       uuid.UUID
	Payer    string
	Payee    string
	Amount   int64
	Currency string
	DueAt    time.Time
	// RunAt is when it may next run: DueAt at first, later after a
	// retry's backoff or an operator's reschedule; never before DueAt.
	RunAt       time.Time
	Status      Status
	Description string
	Metadata    map[string]string
	Attempt     int32
	GatewayRef  string
	LastError   string
	// FailReason is set when Status is FAILED.
	FailReason FailReason
	// ProbeFirst: an earlier attempt may have charged it; the next one
	// asks the gateway first, and until then a cancel is refused.
	ProbeFirst bool
	// RequestsSentBy is when the gateway requests of its attempts had all
	// been sent, in the reading process's clock (zero: never claimed). A
	// proven absence counts only once it is older than the gateway's
	// longest request.
	RequestsSentBy time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// ScheduleID is the schedule that made it, for an occurrence of one
	// (empty: a one-off); Occurrence its key there, the nominal local date
	// and time.
	ScheduleID, Occurrence string
	// Attempts is filled by Get only.
	Attempts []Attempt
	// Seq orders an actor's payments for listing (newest has the highest).
	Seq int64
}

// Attempt is one row of payment_attempts.
type Attempt struct {
	Attempt    int32
	StartedAt  time.Time
	FinishedAt *time.Time
	// Outcome is empty while the attempt runs.
	Outcome    AttemptOutcome
	GatewayRef string
	Error      string
}

// Names spells statuses (or reasons) as stored, for a query parameter
// (status = ANY($1)) or a list to choose from.
func Names[S ~string](ss ...S) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}
