// Package store is the one home of the SQL that reads or moves a payment:
// creating, reading, listing and cancelling payments, claiming and
// releasing them, recording attempts and outcomes, taking back expired
// leases, and the fenced moves of the reconciler, webhooks, the resolver
// and operators. No other package writes payments, payment_attempts or
// payment_actions. Each statement that moves money says why it is safe
// beside it; the transitions each makes are pkg/payment's Moves.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store/paymentdb"
)

// ErrNotAllowed means the statement was asked for a move the state machine does
// not let its actor make; nothing was written.
var ErrNotAllowed = errors.New("move not in payment.Moves")

// Transient reports whether err may pass if the same statement is tried
// again: a lost connection, a timeout, a serialization failure or a
// deadlock, a server shutting down or out of resources. A refusal of the
// data itself (SQLSTATE classes 22 data exception, 23 constraint, 42
// access or syntax, P0 raised by a trigger) or a move the state machine
// refuses is not: trying it again would fail again.
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrNotAllowed) {
		return false
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // no answer from the server: the network, a deadline
	}
	switch pe.Code[:2] {
	case "22", "23", "42", "P0", "2F", "39", "44":
		return false
	}
	return true
}

// Now reads the database's clock: the one due times, leases and runs are
// measured by (a gateway's is checked against it at start).
func Now(ctx context.Context, db pgdb.DB) (time.Time, error) {
	t, err := paymentdb.New(db).Now(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return t, nil
}
