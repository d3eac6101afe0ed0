package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store/paymentdb"
)

// GetAny returns any payer's payment with its attempts (operators only),
// or ErrNotFound.
func (s *Store) GetAny(ctx context.Context, id uuid.UUID) (*payment.Payment, error) {
	due, err := s.dueTime(ctx, id, "")
	if err != nil {
		return nil, err
	}
	return s.get(ctx, id, "", due)
}

// DeadLetter is a DEAD_LETTERED payment with why it was parked.
type DeadLetter struct {
	payment.Payment
	Reason string
	Probes int32
}

// DeadLetters returns up to limit dead letters after (afterDue, afterID),
// oldest due first, each with its attempts.
func (s *Store) DeadLetters(ctx context.Context, afterDue time.Time, afterID uuid.UUID, limit int) ([]DeadLetter, error) {
	q := paymentdb.New(s.db)
	rows, err := q.DeadLetters(ctx, paymentdb.DeadLettersParams{AfterDue: afterDue, AfterID: afterID, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(rows))
	for _, r := range rows {
		p, err := paymentOf(r.Payment, r.SentAgoS)
		if err != nil {
			return nil, fmt.Errorf("dead letter: %w", err)
		}
		out = append(out, DeadLetter{Payment: *p, Reason: deref(r.Payment.DeadLetterReason), Probes: r.Payment.Probes})
	}
	if len(out) == 0 {
		return out, nil
	}
	ids := make([]uuid.UUID, len(out))
	at := make(map[uuid.UUID]int, len(out))
	for i, d := range out {
		ids[i], at[d.ID] = d.ID, i
	}
	attempts, err := q.AttemptsOf(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("dead letters' attempts: %w", err)
	}
	for _, a := range attempts {
		out[at[a.PaymentID]].Attempts = append(out[at[a.PaymentID]].Attempts, attemptOf(a))
	}
	return out, nil
}
