package store

import (
	"errors"
	"time"

	"github.com/google/uuid"
)

// NewPayment is a validated create request. The caller chooses the id and
// the timestamps and encodes the response it wants stored for replays.
type NewPayment struct {
	ID uuid.UUID
	// Payer is the authenticated actor; it scopes the idempotency key.
	Payer string
	// Tenant is whom the sweepers share claims by (empty: DefaultTenant).
	Tenant         string
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

// CreateKind says what a create did.
type CreateKind int

// Create kinds.
const (
	// Created: a new payment was written.
	Created CreateKind = iota + 1
	// Replayed: the key was known with the same request; Response is the stored one.
	Replayed
	// KeyReused: the key was known with a different request; nothing was written.
	KeyReused
)

// CreateResult is what one create did.
type CreateResult struct {
	Kind     CreateKind
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
