package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store/paymentdb"
)

// Store reads and writes the store.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a Store over db.
func NewStore(db *pgxpool.Pool) *Store {
	return &Store{db: db}
}

// Create writes payments, or resolves each against its stored idempotency
// record (scoped to its payer). Results are in input order.
func (s *Store) Create(ctx context.Context, items []NewPayment) ([]CreateResult, error) {
	if len(items) == 0 {
		return nil, nil
	}
	n := len(items)
	cols := paymentdb.CreatePaymentsParams{
		Payers: make([]string, n), Payees: make([]string, n), Currencies: make([]string, n),
		Descriptions: make([]string, n), Metadata: make([]string, n), IdempotencyKeys: make([]string, n),
		Ids: make([][16]byte, n), Amounts: make([]int64, n), DueTimes: make([]time.Time, n),
		CreatedAt: make([]time.Time, n), RequestHashes: make([][]byte, n), Responses: make([][]byte, n),
		Tenants: make([]string, n),
	}
	for i, it := range items {
		if it.IdempotencyKey == "" || it.Payer == "" {
			return nil, fmt.Errorf("create payment %d: payer and idempotency key are required", i)
		}
		m := it.Metadata
		if m == nil {
			m = map[string]string{}
		}
		mb, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("create payment %d: encode metadata: %w", i, err)
		}
		cols.Payers[i], cols.Ids[i], cols.Payees[i], cols.Amounts[i] = it.Payer, it.ID, it.Payee, it.Amount
		cols.Currencies[i], cols.DueTimes[i], cols.Descriptions[i], cols.Metadata[i] = it.Currency, it.DueAt.UTC(), it.Description, string(mb)
		cols.IdempotencyKeys[i], cols.RequestHashes[i], cols.Responses[i], cols.CreatedAt[i] = it.IdempotencyKey, it.RequestHash, it.Response, it.CreatedAt.UTC()
		cols.Tenants[i] = it.Tenant
		if it.Tenant == "" {
			// The API always names one (auth.Principal.Tenant); a caller
			// that does not gets the default tenant, never the payer's own.
			cols.Tenants[i] = DefaultTenant
		}
	}
	for try := 0; ; try++ {
		// Why it is safe: paymentdb/payments.sql, CreatePayments.
		ids, err := paymentdb.New(s.db).CreatePayments(ctx, cols)
		if err != nil {
			return nil, fmt.Errorf("create payments: %w", err)
		}
		inserted := make(map[uuid.UUID]bool, n)
		for _, id := range ids {
			inserted[id] = true
		}
		results, pending, err := s.resolveConflicts(ctx, items, inserted)
		if err != nil {
			return nil, err
		}
		if !pending {
			return results, nil
		}
		if try == 2 {
			return nil, errors.New("create payments: idempotency records vanished while resolving conflicts")
		}
	}
}

// resolveConflicts answers the items that were not inserted from their
// stored records. pending is true if a record vanished (expired between the
// two statements): the caller runs the create again.
func (s *Store) resolveConflicts(ctx context.Context, items []NewPayment, inserted map[uuid.UUID]bool) ([]CreateResult, bool, error) {
	results := make([]CreateResult, len(items))
	var payers, keys []string
	for i, it := range items {
		if inserted[it.ID] {
			results[i] = CreateResult{Kind: Created, Response: it.Response}
		} else {
			payers, keys = append(payers, it.Payer), append(keys, it.IdempotencyKey)
		}
	}
	if len(keys) == 0 {
		return results, false, nil
	}
	stored, err := s.lookupKeys(ctx, payers, keys)
	if err != nil {
		return nil, false, err
	}
	pending := false
	for i, it := range items {
		if inserted[it.ID] {
			continue
		}
		rec, ok := stored[scopedKey{it.Payer, it.IdempotencyKey}]
		if !ok {
			pending = true
			continue
		}
		results[i] = resolve(rec, it.RequestHash)
	}
	return results, pending, nil
}

type scopedKey struct{ payer, key string }

type keyRecord struct {
	hash     []byte
	response []byte
}

func resolve(rec keyRecord, hash []byte) CreateResult {
	if bytes.Equal(rec.hash, hash) {
		return CreateResult{Kind: Replayed, Response: rec.response}
	}
	return CreateResult{Kind: KeyReused}
}

func (s *Store) lookupKeys(ctx context.Context, payers, keys []string) (map[scopedKey]keyRecord, error) {
	rows, err := paymentdb.New(s.db).LookupKeys(ctx, paymentdb.LookupKeysParams{Payers: payers, Keys: keys})
	if err != nil {
		return nil, fmt.Errorf("look up idempotency keys: %w", err)
	}
	out := make(map[scopedKey]keyRecord, len(keys))
	for _, r := range rows {
		out[scopedKey{r.Payer, r.IdempotencyKey}] = keyRecord{hash: r.RequestHash, response: r.Response}
	}
	return out, nil
}

// Replay resolves a key without writing: found is false when the key is not
// known. The API uses it for requests that no longer validate (a replay after
// the due time has passed must still return the stored answer).
func (s *Store) Replay(ctx context.Context, payer, key string, hash []byte) (res CreateResult, found bool, err error) {
	stored, err := s.lookupKeys(ctx, []string{payer}, []string{key})
	if err != nil {
		return CreateResult{}, false, err
	}
	rec, ok := stored[scopedKey{payer, key}]
	if !ok {
		return CreateResult{}, false, nil
	}
	return resolve(rec, hash), true, nil
}

// paymentOf is the payment a row of payments holds; sentAgo is how long
// ago its requests had all been sent by the database's clock (negative:
// never), which sentBy turns into this process's.
func paymentOf(r paymentdb.Payment, sentAgo float64) (*payment.Payment, error) {
	p := payment.Payment{ID: r.ID, Payer: r.Payer, Payee: r.Payee, Amount: r.AmountMinor, Currency: r.Currency,
		DueAt: r.DueTime.UTC(), RunAt: r.RunAt.UTC(), Status: payment.Status(r.Status), Description: r.Description,
		Attempt: r.Attempt, GatewayRef: deref(r.GatewayRef), LastError: deref(r.LastError),
		FailReason: payment.FailReason(deref(r.FailureReason)), ProbeFirst: r.ProbeFirst,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), Occurrence: deref(r.Occurrence)}
	if r.ScheduleID != nil {
		p.ScheduleID = r.ScheduleID.String()
	}
	if sentAgo >= 0 {
		p.RequestsSentBy = sentBy(&sentAgo)
	}
	if len(r.Metadata) > 0 {
		if err := json.Unmarshal(r.Metadata, &p.Metadata); err != nil {
			return nil, fmt.Errorf("decode metadata of %s: %w", p.ID, err)
		}
	}
	return &p, nil
}

// deref is *s, or "" for none (a NULL column).
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// dueTime returns the partition key of payer's payment (any payer's when
// payer is empty), or ErrNotFound.
func (s *Store) dueTime(ctx context.Context, id uuid.UUID, payer string) (time.Time, error) {
	// The partition key first: paymentdb/payments.sql, DueTime.
	due, err := paymentdb.New(s.db).DueTime(ctx, paymentdb.DueTimeParams{ID: id, Payer: payer})
	if errors.Is(err, pgx.ErrNoRows) {
		return due, ErrNotFound
	}
	if err != nil {
		return due, fmt.Errorf("find payment %s: %w", id, err)
	}
	return due, nil
}

// Get returns one of payer's payments with its attempts, or ErrNotFound.
func (s *Store) Get(ctx context.Context, payer string, id uuid.UUID) (*payment.Payment, error) {
	due, err := s.dueTime(ctx, id, payer)
	if err != nil {
		return nil, err
	}
	return s.get(ctx, id, payer, due)
}

// get reads payer's payment id (any payer's when payer is empty) in the
// partition of due, with its attempts.
func (s *Store) get(ctx context.Context, id uuid.UUID, payer string, due time.Time) (*payment.Payment, error) {
	q := paymentdb.New(s.db)
	r, err := q.GetPayment(ctx, paymentdb.GetPaymentParams{ID: id, Payer: payer, DueTime: due})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get payment %s: %w", id, err)
	}
	p, err := paymentOf(r.Payment, r.SentAgoS)
	if err != nil {
		return nil, fmt.Errorf("get payment %s: %w", id, err)
	}
	attempts, err := q.AttemptsOf(ctx, []uuid.UUID{id})
	if err != nil {
		return nil, fmt.Errorf("get attempts of %s: %w", id, err)
	}
	for _, a := range attempts {
		p.Attempts = append(p.Attempts, attemptOf(a))
	}
	return p, nil
}

// attemptOf is the attempt a row of payment_attempts holds.
func attemptOf(r paymentdb.AttemptsOfRow) payment.Attempt {
	a := payment.Attempt{Attempt: r.Attempt, StartedAt: r.StartedAt.UTC(), Outcome: payment.AttemptOutcome(r.Outcome),
		GatewayRef: r.GatewayRef, Error: r.Error}
	if r.FinishedAt != nil {
		t := r.FinishedAt.UTC()
		a.FinishedAt = &t
	}
	return a
}

// List returns up to limit of payer's payments with seq < before (0: from
// the newest), newest first, optionally only those in status.
func (s *Store) List(ctx context.Context, payer string, status payment.Status, before int64, limit int) ([]payment.Payment, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := paymentdb.New(s.db).ListPayments(ctx, paymentdb.ListPaymentsParams{Payer: payer, Before: before,
		Status: string(status), MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	out := make([]payment.Payment, 0, len(rows))
	for _, r := range rows {
		p, err := paymentOf(r.Payment, r.SentAgoS)
		if err != nil {
			return nil, fmt.Errorf("list payments: %w", err)
		}
		p.Seq = r.Seq
		out = append(out, *p)
	}
	return out, nil
}

// Cancel moves payer's payment from PENDING to CANCELLED. A payment already
// CANCELLED is returned as is (cancel is idempotent). A payment in any other
// status returns itself with ErrAlreadyProcessing; an unknown one ErrNotFound.
func (s *Store) Cancel(ctx context.Context, payer string, id uuid.UUID) (*payment.Payment, error) {
	due, err := s.dueTime(ctx, id, payer)
	if err != nil {
		return nil, err
	}
	q := paymentdb.New(s.db)
	for try := 0; ; try++ {
		// Why it is safe: paymentdb/payments.sql, CancelPayment.
		r, err := q.CancelPayment(ctx, paymentdb.CancelPaymentParams{ID: id, Payer: payer, DueTime: due})
		if err == nil {
			p, err := paymentOf(r, -1)
			if err == nil && r.RequestsSentBy != nil {
				// Cancelled from PENDING, nothing in flight: the row's
				// own instant, not one carried into this process's clock.
				p.RequestsSentBy = r.RequestsSentBy.UTC()
			}
			return p, err
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("cancel payment %s: %w", id, err)
		}
		var p *payment.Payment
		got, err := q.GetPayment(ctx, paymentdb.GetPaymentParams{ID: id, Payer: payer, DueTime: due})
		if err == nil {
			p, err = paymentOf(got.Payment, got.SentAgoS)
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, ErrNotFound
		case err != nil:
			return nil, fmt.Errorf("cancel payment %s: read status: %w", id, err)
		case p.Status == payment.Cancelled:
			return p, nil
		case p.Status == payment.Pending && try < 2:
			// The UPDATE missed it while a claim held it, and the claim has
			// since been released (an executor refused it untouched), or it
			// is waiting for a probe (probe_first): try the CAS again, then
			// answer ALREADY_PROCESSING.
			continue
		default:
			return p, ErrAlreadyProcessing
		}
	}
}

// Scheduled counts payer's payments scheduled and not yet due, cancelled
// ones included until their due time, stopping at limit.
func (s *Store) Scheduled(ctx context.Context, payer string, limit int) (int, error) {
	n, err := paymentdb.New(s.db).CountScheduled(ctx, paymentdb.CountScheduledParams{Payer: payer, MaxRows: int32(limit)})
	if err != nil {
		return 0, fmt.Errorf("count scheduled payments of %s: %w", payer, err)
	}
	return int(n), nil
}
