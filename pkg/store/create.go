package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// The create's batch, hand-built: its columns go as typed arrays
// ([][16]byte for the ids) that pgx encodes without reflection or
// driver.Valuer, where sqlc's generated parameters would send each uuid
// through a Valuer as text; it is the payments API's busiest statement.
// The rest of the API's statements are named in paymentdb/payments.sql.

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
