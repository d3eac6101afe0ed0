// Package schedule is the payments schedule in Postgres: creating payments
// idempotently, reading, listing and cancelling them. Every SQL statement
// that decides money for those operations is in store.go, with why it is safe.
package schedule

import (
	"errors"
	"time"

	"github.com/google/uuid"
)

// Status is a payment's state; see DESIGN.md for the state machine.
type Status string

// The statuses, spelled as stored and as the API's JSON reads them.
const (
	Pending      Status = "PENDING"
	Processing   Status = "PROCESSING"
	Completed    Status = "COMPLETED"
	Failed       Status = "FAILED"
	Cancelled    Status = "CANCELLED"
	DeadLettered Status = "DEAD_LETTERED"
)

// Payment is one row of payments, as the API shows it.
type Payment struct {
	ID          uuid.UUID
	Payer       string
	Payee       string
	Amount      int64
	Currency    string
	DueAt       time.Time
	Status      Status
	Description string
	Metadata    map[string]string
	Attempt     int32
	GatewayRef  string
	LastError   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
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
	Outcome    string
	GatewayRef string
	Error      string
}

// NewPayment is a validated create request. The caller chooses the id and
// the timestamps and encodes the response it wants stored for replays.
type NewPayment struct {
	ID uuid.UUID
	// Payer is the authenticated actor; it scopes the idempotency key.
	Payer          string
	Payee          string
	Amount         int64
	Currency       string
	DueAt          time.Time
	Description    string
	Metadata       map[string]string
	CreatedAt      time.Time
	IdempotencyKey string
	// RequestHash fingerprints the request body: a replay must match it.
	RequestHash []byte
	// Response is returned verbatim by every replay of the key.
	Response []byte
}

// Outcome says what a create did.
type Outcome int

// Create outcomes.
const (
	// Created: a new payment was written.
	Created Outcome = iota + 1
	// Replayed: the key was known with the same request; Response is the stored one.
	Replayed
	// KeyReused: the key was known with a different request; nothing was written.
	KeyReused
)

// CreateResult is the outcome of one create.
type CreateResult struct {
	Outcome  Outcome
	Response []byte
}

// Errors the store returns for client-visible conditions.
var (
	// ErrNotFound: no such payment for this payer (another payer's payment
	// is indistinguishable from a missing one).
	ErrNotFound = errors.New("payment not found")
	// ErrAlreadyProcessing: cancel lost to the claim or a later transition.
	ErrAlreadyProcessing = errors.New("payment already processing")
)
