package store

import (
	"github.com/paysched/paysched/pkg/payment"

	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// getAnySQL is getSQL for operators: any payer's payment.
const getAnySQL = `
SELECT ` + paymentCols + `
FROM payments p
WHERE p.id = $1 AND p.due_time = $2`

// GetAny returns any payer's payment with its attempts (operators only),
// or ErrNotFound.
func (s *Store) GetAny(ctx context.Context, id uuid.UUID) (*payment.Payment, error) {
	due, err := s.dueTime(ctx, id, "")
	if err != nil {
		return nil, err
	}
	return s.get(ctx, id, getAnySQL, id, due)
}

// DeadLetter is a DEAD_LETTERED payment with why it was parked.
type DeadLetter struct {
	payment.Payment
	Reason string
	Probes int32
}

// deadLettersSQL pages dead letters oldest due first, through the partial
// index on (due_time, id) of DEAD_LETTERED rows.
const deadLettersSQL = `
SELECT coalesce(p.dead_letter_reason, ''), p.probes, ` + paymentCols + `
FROM payments p
WHERE p.status = 'DEAD_LETTERED' AND p.due_time <= now() AND (p.due_time, p.id) > ($1, $2)
ORDER BY p.due_time, p.id
LIMIT $3`

const attemptsOfSQL = `
SELECT payment_id, attempt, started_at, finished_at, coalesce(outcome, ''), coalesce(gateway_ref, ''), coalesce(error, '')
FROM payment_attempts WHERE payment_id = ANY($1) ORDER BY payment_id, attempt`

// DeadLetters returns up to limit dead letters after (afterDue, afterID),
// oldest due first, each with its attempts.
func (s *Store) DeadLetters(ctx context.Context, afterDue time.Time, afterID uuid.UUID, limit int) ([]DeadLetter, error) {
	rows, err := s.db.Query(ctx, deadLettersSQL, afterDue, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	var out []DeadLetter
	for rows.Next() {
		var d DeadLetter
		p, err := scanPayment(rows, &d.Reason, &d.Probes)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan dead letter: %w", err)
		}
		d.Payment = *p
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	ids := make([]uuid.UUID, len(out))
	at := make(map[uuid.UUID]int, len(out))
	for i, d := range out {
		ids[i], at[d.ID] = d.ID, i
	}
	rows, err = s.db.Query(ctx, attemptsOfSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("dead letters' attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		a, err := scanAttempt(rows, &id)
		if err != nil {
			return nil, fmt.Errorf("scan attempt: %w", err)
		}
		out[at[id]].Attempts = append(out[at[id]].Attempts, a)
	}
	return out, rows.Err()
}
