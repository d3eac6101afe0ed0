package store

import (
	"github.com/paysched/paysched/pkg/payment"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store reads and writes the store.
type Store struct {
	db *pgxpool.Pool
}

// NewStore returns a Store over db.
func NewStore(db *pgxpool.Pool) *Store {
	return &Store{db: db}
}

// createSQL inserts a batch of payments, possibly of several payers, in one
// statement.
//
// Why it is safe: the idempotency record and the payment are written by the
// same statement, so either both exist or neither does. ON CONFLICT on the
// unique (payer, idempotency_key) index makes concurrent creates with one key
// serialize inside Postgres: the loser waits for the winner's commit and then
// inserts nothing, and only rows whose index insert succeeded (RETURNING)
// reach payments. A key repeated within the batch is inserted once. Rows are
// fed in (payer, key) order so that two overlapping batches take their key
// locks in the same order and cannot deadlock.
const createSQL = `
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], $6::timestamptz[],
                         $7::text[], $8::text[], $9::text[], $10::bytea[], $11::bytea[], $12::timestamptz[],
                         $13::text[])
        AS t(payer, id, payee, amount_minor, currency, due_time, description, metadata,
             idempotency_key, request_hash, response, created_at, tenant)
), idx AS (
    INSERT INTO payment_index (id, payer, payee, due_time, idempotency_key, request_hash, response, created_at, tenant,
                               currency, amount_minor)
    SELECT id, payer, payee, due_time, idempotency_key, request_hash, response, created_at, tenant, currency, amount_minor
    FROM input ORDER BY payer, idempotency_key
    ON CONFLICT (payer, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
)
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status,
                      description, metadata, created_at, updated_at, tenant)
SELECT i.id, i.payer, i.payee, i.amount_minor, i.currency, i.due_time, i.due_time, 'PENDING',
       i.description, i.metadata::jsonb, i.created_at, i.created_at, i.tenant
FROM input i JOIN idx USING (id)
RETURNING id`

// lookupKeysSQL reads the stored idempotency records of keys that conflicted.
const lookupKeysSQL = `
SELECT i.payer, i.idempotency_key, i.request_hash, i.response
FROM payment_index i
JOIN unnest($1::text[], $2::text[]) AS k(payer, idempotency_key)
  ON i.payer = k.payer AND i.idempotency_key = k.idempotency_key`

// Create writes payments, or resolves each against its stored idempotency
// record (scoped to its payer). Results are in input order.
func (s *Store) Create(ctx context.Context, items []NewPayment) ([]CreateResult, error) {
	if len(items) == 0 {
		return nil, nil
	}
	n := len(items)
	cols := struct {
		payers, payees, currencies, descs, metas, keys []string
		tenants                                        []string
		ids                                            [][16]byte // encodes without reflection
		amounts                                        []int64
		dues, created                                  []time.Time
		hashes, resps                                  [][]byte
	}{
		payers: make([]string, n), payees: make([]string, n), currencies: make([]string, n),
		descs: make([]string, n), metas: make([]string, n), keys: make([]string, n),
		ids: make([][16]byte, n), amounts: make([]int64, n), dues: make([]time.Time, n),
		created: make([]time.Time, n), hashes: make([][]byte, n), resps: make([][]byte, n),
		tenants: make([]string, n),
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
		cols.payers[i], cols.ids[i], cols.payees[i], cols.amounts[i] = it.Payer, it.ID, it.Payee, it.Amount
		cols.currencies[i], cols.dues[i], cols.descs[i], cols.metas[i] = it.Currency, it.DueAt.UTC(), it.Description, string(mb)
		cols.keys[i], cols.hashes[i], cols.resps[i], cols.created[i] = it.IdempotencyKey, it.RequestHash, it.Response, it.CreatedAt.UTC()
		cols.tenants[i] = it.Tenant
		if it.Tenant == "" {
			// The API always names one (auth.Principal.Tenant); a caller
			// that does not gets the default tenant, never the payer's own.
			cols.tenants[i] = DefaultTenant
		}
	}
	for try := 0; ; try++ {
		rows, err := s.db.Query(ctx, createSQL, cols.payers, cols.ids, cols.payees, cols.amounts, cols.currencies,
			cols.dues, cols.descs, cols.metas, cols.keys, cols.hashes, cols.resps, cols.created, cols.tenants)
		if err != nil {
			return nil, fmt.Errorf("create payments: %w", err)
		}
		inserted := make(map[uuid.UUID]bool, n)
		for rows.Next() {
			var id uuid.UUID
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("create payments: scan: %w", err)
			}
			inserted[id] = true
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("create payments: %w", err)
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
	rows, err := s.db.Query(ctx, lookupKeysSQL, payers, keys)
	if err != nil {
		return nil, fmt.Errorf("look up idempotency keys: %w", err)
	}
	defer rows.Close()
	out := make(map[scopedKey]keyRecord, len(keys))
	for rows.Next() {
		var k scopedKey
		var r keyRecord
		if err := rows.Scan(&k.payer, &k.key, &r.hash, &r.response); err != nil {
			return nil, fmt.Errorf("look up idempotency keys: scan: %w", err)
		}
		out[k] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up idempotency keys: %w", err)
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

// paymentCols is the column list scanPayment reads, in order.
const paymentCols = `p.id, p.payer, p.payee, p.amount_minor, p.currency, p.due_time, p.status,
       p.description, p.metadata, p.attempt, coalesce(p.gateway_ref, ''), coalesce(p.last_error, ''),
       coalesce(p.failure_reason, ''), p.probe_first, p.created_at, p.updated_at, p.run_at,
       coalesce(p.schedule_id::text, ''), coalesce(p.occurrence, ''), ` + sentAgoCol

func scanPayment(row pgx.Row, extra ...any) (*payment.Payment, error) {
	var p payment.Payment
	var meta []byte
	var ago *float64
	dest := append(extra, &p.ID, &p.Payer, &p.Payee, &p.Amount, &p.Currency, &p.DueAt, &p.Status,
		&p.Description, &meta, &p.Attempt, &p.GatewayRef, &p.LastError, &p.FailReason, &p.ProbeFirst, &p.CreatedAt, &p.UpdatedAt, &p.RunAt,
		&p.ScheduleID, &p.Occurrence, &ago)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	p.RequestsSentBy = sentBy(ago)
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &p.Metadata); err != nil {
			return nil, fmt.Errorf("decode metadata of %s: %w", p.ID, err)
		}
	}
	p.DueAt, p.RunAt, p.CreatedAt, p.UpdatedAt = p.DueAt.UTC(), p.RunAt.UTC(), p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	return &p, nil
}

// dueSQL finds a payment's partition key. A payment's due_time never
// changes, so reading it first is race-free, and passing it to the next
// statement as a parameter lets the planner prune to one partition: a
// statement that takes it from a subquery instead is planned and locked
// against every daily partition (a year of them), which made a cancel cost
// tens of milliseconds and, a few at once, overflowed the lock table.
const dueSQL = `SELECT due_time FROM payment_index WHERE id = $1 AND ($2 = '' OR payer = $2)`

// dueTime returns the partition key of payer's payment (any payer's when
// payer is empty), or ErrNotFound.
func (s *Store) dueTime(ctx context.Context, id uuid.UUID, payer string) (time.Time, error) {
	var due time.Time
	err := s.db.QueryRow(ctx, dueSQL, id, payer).Scan(&due)
	if errors.Is(err, pgx.ErrNoRows) {
		return due, ErrNotFound
	}
	if err != nil {
		return due, fmt.Errorf("find payment %s: %w", id, err)
	}
	return due, nil
}

// getSQL reads one partition (the due time found first) and checks the payer, so
// another payer's payment reads exactly like a missing one.
const getSQL = `
SELECT ` + paymentCols + `
FROM payments p
WHERE p.id = $1 AND p.payer = $2
  AND p.due_time = $3`

const attemptsSQL = `
SELECT attempt, started_at, finished_at, coalesce(outcome, ''), coalesce(gateway_ref, ''), coalesce(error, '')
FROM payment_attempts WHERE payment_id = $1 ORDER BY attempt`

// Get returns one of payer's payments with its attempts, or ErrNotFound.
func (s *Store) Get(ctx context.Context, payer string, id uuid.UUID) (*payment.Payment, error) {
	due, err := s.dueTime(ctx, id, payer)
	if err != nil {
		return nil, err
	}
	return s.get(ctx, id, getSQL, id, payer, due)
}

func (s *Store) get(ctx context.Context, id uuid.UUID, sql string, args ...any) (*payment.Payment, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(attemptsSQL, id)
	br := s.db.SendBatch(ctx, b)
	defer br.Close()
	p, err := scanPayment(br.QueryRow())
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get payment %s: %w", id, err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("get attempts of %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, fmt.Errorf("scan attempt of %s: %w", id, err)
		}
		p.Attempts = append(p.Attempts, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get attempts of %s: %w", id, err)
	}
	return p, nil
}

func scanAttempt(row pgx.Row, extra ...any) (payment.Attempt, error) {
	var a payment.Attempt
	if err := row.Scan(append(extra, &a.Attempt, &a.StartedAt, &a.FinishedAt, &a.Outcome, &a.GatewayRef, &a.Error)...); err != nil {
		return a, err
	}
	a.StartedAt = a.StartedAt.UTC()
	if a.FinishedAt != nil {
		t := a.FinishedAt.UTC()
		a.FinishedAt = &t
	}
	return a, nil
}

// listSQL pages an actor's payments newest first by seq, an identity
// assigned at insert: keyset paging on it never repeats a row and never skips
// one that existed when paging began, whatever is inserted meanwhile.
const listSQL = `
SELECT i.seq, ` + paymentCols + `
FROM payment_index i
JOIN payments p ON p.id = i.id AND p.due_time = i.due_time
WHERE i.payer = $1 AND i.seq < $2 AND ($3 = '' OR p.status = $3)
ORDER BY i.seq DESC
LIMIT $4`

// List returns up to limit of payer's payments with seq < before (0: from
// the newest), newest first, optionally only those in status.
func (s *Store) List(ctx context.Context, payer string, status payment.Status, before int64, limit int) ([]payment.Payment, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.db.Query(ctx, listSQL, payer, before, string(status), limit)
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	defer rows.Close()
	var out []payment.Payment
	for rows.Next() {
		var seq int64
		p, err := scanPayment(rows, &seq)
		if err != nil {
			return nil, fmt.Errorf("list payments: scan: %w", err)
		}
		p.Seq = seq
		out = append(out, *p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	return out, nil
}

// cancelSQL is the cancel CAS: one conditional UPDATE from PENDING.
//
// Why it is safe against the claim: both are single UPDATEs that require
// status = 'PENDING'. Whichever locks the row first wins. If the claim holds
// the row, this UPDATE waits, re-reads the committed row (now PROCESSING) and
// matches nothing; if the cancel holds it, the claim's SKIP LOCKED passes it
// by, and on its next sweep the row is no longer PENDING. There is no
// read-then-write window in between.
//
// A PENDING payment with probe_first set may already be charged (an
// earlier attempt's lease expired, or the gateway gave no definitive
// answer): cancelling it would tell the payer "not charged" when the
// gateway may say otherwise, so it answers ALREADY_PROCESSING until an
// attempt has asked the gateway. The flag is a column of the row this
// UPDATE locks and re-checks, so it cannot race with the claim, an
// executor's outcome or the reaper: all of them change the same row.
const cancelSQL = `
UPDATE payments p SET status = 'CANCELLED', updated_at = now()
WHERE p.id = $1 AND p.payer = $2 AND p.status = 'PENDING' AND NOT p.probe_first
  AND p.due_time = $3
RETURNING ` + paymentCols

// Cancel moves payer's payment from PENDING to CANCELLED. A payment already
// CANCELLED is returned as is (cancel is idempotent). A payment in any other
// status returns itself with ErrAlreadyProcessing; an unknown one ErrNotFound.
func (s *Store) Cancel(ctx context.Context, payer string, id uuid.UUID) (*payment.Payment, error) {
	due, err := s.dueTime(ctx, id, payer)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		p, err := scanPayment(s.db.QueryRow(ctx, cancelSQL, id, payer, due))
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("cancel payment %s: %w", id, err)
		}
		p, err = scanPayment(s.db.QueryRow(ctx, getSQL, id, payer, due))
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

// scheduledSQL counts payer's payments not yet due, up to $2, from the
// index on payment_index (payer, due_time) (migration 12): a bounded
// read, however many the payer has.
const scheduledSQL = `SELECT count(*) FROM (SELECT 1 FROM payment_index WHERE payer = $1 AND due_time > now() LIMIT $2) s`

// Scheduled counts payer's payments scheduled and not yet due, cancelled
// ones included until their due time, stopping at limit.
func (s *Store) Scheduled(ctx context.Context, payer string, limit int) (int, error) {
	var n int
	if err := s.db.QueryRow(ctx, scheduledSQL, payer, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("count scheduled payments of %s: %w", payer, err)
	}
	return n, nil
}
