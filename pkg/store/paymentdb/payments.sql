-- name: LookupKeys :many
-- The stored idempotency records of keys that conflicted.
SELECT i.payer, i.idempotency_key::text AS idempotency_key, i.request_hash, i.response
FROM payment_index i
JOIN (SELECT unnest(@payers::text[]) AS payer, unnest(@keys::text[]) AS idempotency_key) k
  ON i.payer = k.payer AND i.idempotency_key = k.idempotency_key;

-- name: DueTime :one
-- A payment's partition key (any payer's when payer is empty). A payment's
-- due_time never changes, so reading it first is race-free, and passing
-- it to the next statement as a parameter lets the planner prune to one
-- partition: a statement that takes it from a subquery instead is planned
-- and locked against every daily partition (a year of them), which made a
-- cancel cost tens of milliseconds and, a few at once, overflowed the lock
-- table.
SELECT due_time FROM payment_index WHERE id = @id AND (@payer::text = '' OR payer = @payer::text);

-- name: GetPayment :one
-- One partition (the due time found first), the payer checked (any
-- payer's when payer is empty), so another payer's payment reads exactly
-- like a missing one. sent_ago_s is how long ago its requests had all been sent,
-- by the database's clock (-1: never); see store's sentBy.
SELECT sqlc.embed(p), COALESCE(EXTRACT(epoch FROM clock_timestamp() - p.requests_sent_by)::float8, -1)::float8 AS sent_ago_s
FROM payments p
WHERE p.id = @id AND (@payer::text = '' OR p.payer = @payer::text) AND p.due_time = @due_time;

-- name: AttemptsOf :many
-- The attempts of payments (one payment's, or a page's), in order.
SELECT payment_id, attempt, started_at, finished_at, coalesce(outcome, '')::text AS outcome,
       coalesce(gateway_ref, '')::text AS gateway_ref, coalesce(error, '')::text AS error
FROM payment_attempts WHERE payment_id = ANY(@payment_ids::uuid[]) ORDER BY payment_id, attempt;

-- name: ListPayments :many
-- Pages a payer's payments newest first by seq, an identity assigned at
-- insert: keyset paging on it never repeats a row and never skips one
-- that existed when paging began, whatever is inserted meanwhile.
SELECT i.seq::bigint AS seq, sqlc.embed(p), COALESCE(EXTRACT(epoch FROM clock_timestamp() - p.requests_sent_by)::float8, -1)::float8 AS sent_ago_s
FROM payment_index i
JOIN payments p ON p.id = i.id AND p.due_time = i.due_time
WHERE i.payer = @payer AND i.seq < @before::bigint AND (@status::text = '' OR p.status = @status::text)
ORDER BY i.seq DESC
LIMIT @max_rows;

-- name: CancelPayment :one
-- The cancel CAS: one conditional UPDATE from PENDING.
--
-- Why it is safe against the claim: both are single UPDATEs that require
-- status = 'PENDING'. Whichever locks the row first wins. If the claim
-- holds the row, this UPDATE waits, re-reads the committed row (now
-- PROCESSING) and matches nothing; if the cancel holds it, the claim's
-- SKIP LOCKED passes it by, and on its next sweep the row is no longer
-- PENDING. There is no read-then-write window in between.
--
-- A PENDING payment with probe_first set may already be charged (an
-- earlier attempt's lease expired, or the gateway gave no definitive
-- answer): cancelling it would tell the payer "not charged" when the
-- gateway may say otherwise, so it answers ALREADY_PROCESSING until an
-- attempt has asked the gateway. The flag is a column of the row this
-- UPDATE locks and re-checks, so it cannot race with the claim, an
-- executor's outcome or the reaper: all of them change the same row.
UPDATE payments p SET status = 'CANCELLED', updated_at = now()
WHERE p.id = @id AND p.payer = @payer AND p.status = 'PENDING' AND NOT p.probe_first
  AND p.due_time = @due_time
RETURNING *;

-- name: DeadLetters :many
-- Pages dead letters oldest due first, through the partial index on
-- (due_time, id) of DEAD_LETTERED rows.
SELECT sqlc.embed(p), COALESCE(EXTRACT(epoch FROM clock_timestamp() - p.requests_sent_by)::float8, -1)::float8 AS sent_ago_s
FROM payments p
WHERE p.status = 'DEAD_LETTERED' AND p.due_time <= now() AND (p.due_time, p.id) > (@after_due::timestamptz, @after_id::uuid)
ORDER BY p.due_time, p.id
LIMIT @max_rows;

-- name: CountScheduled :one
-- A payer's payments not yet due, up to max_rows, from the index on
-- payment_index (payer, due_time) (migration 12): a bounded read, however
-- many the payer has.
SELECT count(*) FROM (SELECT 1 FROM payment_index WHERE payer = @payer AND due_time > now() LIMIT @max_rows) s;

-- name: Now :one
-- The database's clock: the one due times, leases and runs are measured by.
SELECT now()::timestamptz AS now;

-- name: CreatePayments :many
-- Inserts a batch of payments, possibly of several payers, in one
-- statement; the ids of those it inserted. The ids are pg_catalog.uuid so
-- that they go as [16]byte arrays, without reflection (sqlc.yaml): this is
-- the payments API's busiest statement.
--
-- Why it is safe: the idempotency record and the payment are written by
-- the same statement, so either both exist or neither does. ON CONFLICT on
-- the unique (payer, idempotency_key) index makes concurrent creates with
-- one key serialize inside Postgres: the loser waits for the winner's
-- commit and then inserts nothing, and only rows whose index insert
-- succeeded (RETURNING) reach payments. A key repeated within the batch is
-- inserted once. Rows are fed in (payer, key) order so that two
-- overlapping batches take their key locks in the same order and cannot
-- deadlock.
WITH input AS (
    SELECT unnest(@payers::text[]) AS payer, unnest(@ids::pg_catalog.uuid[]) AS id, unnest(@payees::text[]) AS payee,
           unnest(@amounts::bigint[]) AS amount_minor, unnest(@currencies::text[]) AS currency,
           unnest(@due_times::timestamptz[]) AS due_time, unnest(@descriptions::text[]) AS description,
           unnest(@metadata::text[]) AS metadata, unnest(@idempotency_keys::text[]) AS idempotency_key,
           unnest(@request_hashes::bytea[]) AS request_hash, unnest(@responses::bytea[]) AS response,
           unnest(@created_at::timestamptz[]) AS created_at, unnest(@tenants::text[]) AS tenant
), idx AS (
    INSERT INTO payment_index (id, payer, payee, due_time, idempotency_key, request_hash, response, created_at, tenant,
                               currency, amount_minor)
    SELECT input.id, input.payer, input.payee, input.due_time, input.idempotency_key, input.request_hash, input.response,
           input.created_at, input.tenant, input.currency, input.amount_minor
    FROM input ORDER BY input.payer, input.idempotency_key
    ON CONFLICT (payer, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING payment_index.id
)
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status,
                      description, metadata, created_at, updated_at, tenant)
SELECT i.id, i.payer, i.payee, i.amount_minor, i.currency, i.due_time, i.due_time, 'PENDING',
       i.description, i.metadata::jsonb, i.created_at, i.created_at, i.tenant
FROM input i JOIN idx USING (id)
RETURNING payments.id;
