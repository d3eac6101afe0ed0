-- The search's statements (search.go): the candidate walks, one per shape
-- of search, each one index range of payment_index in (due_time, id)
-- order returning (id, due_time, kept); the read of the candidates'
-- payments; and the walks of the statuses at rest through their partial
-- indexes. The walks' cursor is (after_due, after_id), their end
-- due_before, their bound max.

-- name: WalkByID :many
-- The search by id: payment_index's primary key.
SELECT id, due_time, true AS kept FROM payment_index WHERE id = @id;

-- name: WalkByKey :many
-- The search by a payer's idempotency key.
SELECT id, due_time, true AS kept FROM payment_index WHERE payer = @payer AND idempotency_key = @idempotency_key;

-- name: WalkByPayer :many
-- A payer's payments by due time.
SELECT id, due_time, true AS kept FROM payment_index
WHERE payer = @payer AND (due_time, id) > (@after_due::timestamptz, @after_id::uuid) AND due_time < @due_before
ORDER BY due_time, id LIMIT @max;

-- name: WalkByPayee :many
-- A payee's payments by due time.
SELECT id, due_time, true AS kept FROM payment_index
WHERE payee = @payee AND (due_time, id) > (@after_due::timestamptz, @after_id::uuid) AND due_time < @due_before
ORDER BY due_time, id LIMIT @max;

-- name: WalkByTenant :many
-- A tenant's payments by due time.
SELECT id, due_time, true AS kept FROM payment_index
WHERE tenant = @tenant AND (due_time, id) > (@after_due::timestamptz, @after_id::uuid) AND due_time < @due_before
ORDER BY due_time, id LIMIT @max;

-- name: WalkByRef :many
-- The payments whose attempts got a gateway ref: a charge ref is one
-- payment's, so this is a lookup, bounded as every walk is.
SELECT DISTINCT i.id, i.due_time, true AS kept FROM payment_attempts a JOIN payment_index i ON i.id = a.payment_id
WHERE a.gateway_ref = @ref AND (i.due_time, i.id) > (@after_due::timestamptz, @after_id::uuid) AND i.due_time < @due_before
ORDER BY i.due_time, i.id LIMIT @max;

-- name: WalkByCurrency :many
-- One currency's payments by due time, each saying whether its amount is
-- within [min_amount, max_amount]: the walk's bound is on entries looked
-- at, kept or not, and the cursor goes on from the last one looked at.
SELECT id, due_time, amount_minor BETWEEN @min_amount AND @max_amount AS kept FROM payment_index
WHERE currency = @currency AND (due_time, id) > (@after_due::timestamptz, @after_id::uuid) AND due_time < @due_before
ORDER BY due_time, id LIMIT @max;

-- name: WalkByDue :many
-- Every payment by due time.
SELECT id, due_time, true AS kept FROM payment_index
WHERE (due_time, id) > (@after_due::timestamptz, @after_id::uuid) AND due_time < @due_before
ORDER BY due_time, id LIMIT @max;

-- name: SearchRows :many
-- The candidates' payments by primary key, those that match the filters
-- (each empty for any). An id is unique, so id = ANY and due_time = ANY
-- match exactly the candidates. The due range [lo, hi] (the first and
-- last candidates', in walk order) prunes the partitions to the
-- candidates' days: a plan prunes on an array only when planned for its
-- values, and once pgx's prepared statement runs on a generic plan (after
-- five runs), every partition of the month was probed for every id (an
-- export of 10,000 rows: 0.9 s at 5M). A range of parameters prunes at
-- executor start.
SELECT p.id, p.payer, p.payee, p.amount_minor AS amount, p.currency, p.due_time AS due, p.status, p.attempt,
       coalesce(p.dead_letter_reason, p.failure_reason, '') AS reason, p.tenant
FROM payments p
WHERE p.id = ANY(@ids::uuid[]) AND p.due_time = ANY(@dues::timestamptz[])
  AND p.due_time BETWEEN @lo AND @hi
  AND (@status::text = '' OR p.status = @status)
  AND (@payee::text = '' OR p.payee = @payee)
  AND (@currency::text = '' OR p.currency = @currency)
  AND p.amount_minor BETWEEN @min_amount AND @max_amount
  AND (@err_class::text = '' OR coalesce(p.failure_reason, p.dead_letter_reason) = @err_class)
  AND (@tenant::text = '' OR p.tenant = @tenant)
ORDER BY p.due_time, p.id;

-- name: WalkDeadLetters :many
-- The dead letters after the cursor and due before due_before, in
-- (due_time, id) order through their partial index, at most max. The
-- status is a literal: a partial index needs it when the plan is made.
SELECT p.id, p.payer, p.payee, p.amount_minor AS amount, p.currency, p.due_time AS due, p.status, p.attempt,
       coalesce(p.dead_letter_reason, p.failure_reason, '') AS reason, p.tenant
FROM payments p
WHERE p.status = 'DEAD_LETTERED' AND (p.due_time, p.id) > (@after_due::timestamptz, @after_id::uuid) AND p.due_time < @due_before
ORDER BY p.due_time, p.id
LIMIT @max;

-- name: WalkFailed :many
-- The failed payments, as WalkDeadLetters, through their own partial
-- index (version 22).
SELECT p.id, p.payer, p.payee, p.amount_minor AS amount, p.currency, p.due_time AS due, p.status, p.attempt,
       coalesce(p.dead_letter_reason, p.failure_reason, '') AS reason, p.tenant
FROM payments p
WHERE p.status = 'FAILED' AND (p.due_time, p.id) > (@after_due::timestamptz, @after_id::uuid) AND p.due_time < @due_before
ORDER BY p.due_time, p.id
LIMIT @max;
