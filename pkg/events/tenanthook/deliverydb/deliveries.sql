-- name: Recorded :many
-- Which of the notifications already have deliveries, and to which
-- endpoints: one probe of the (msg_id, endpoint_id) key each.
SELECT msg_id, endpoint_id FROM webhook_deliveries WHERE msg_id = ANY(@msg_ids::text[]);

-- name: StartFailing :one
-- Notes an endpoint's failure: the first since its last success starts
-- the clock that disables it.
UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, @at::timestamptz)
WHERE id = @id RETURNING failing_since::timestamptz;

-- name: Healed :exec
-- A success stops the clock.
UPDATE webhook_endpoints SET failing_since = NULL WHERE id = @id AND failing_since IS NOT NULL;

-- name: Disable :execrows
-- Disables an endpoint once: only the statement that finds it enabled
-- marks it to be announced (every failing attempt announced it again).
UPDATE webhook_endpoints SET enabled = false, disabled_reason = @reason::text, disabled_at = now(), announce = true
WHERE id = @id AND enabled;

-- name: SweepDeliveries :execrows
-- Finished deliveries done before the cutoff, by the notification's age
-- (the block range index) then what is done: a delivery is done after
-- its notification. WAITING ones are kept whatever their age.
DELETE FROM webhook_deliveries WHERE id IN (
    SELECT d.id FROM webhook_deliveries d
    WHERE d.noted_at < @cutoff::timestamptz AND d.state <> 'WAITING' AND d.done_at < @cutoff::timestamptz
    LIMIT @batch::int);

-- name: SweepMessages :execrows
-- Messages noted before the cutoff that no delivery refers to.
DELETE FROM webhook_messages WHERE msg_id IN (
    SELECT m.msg_id FROM webhook_messages m WHERE m.noted_at < @cutoff::timestamptz
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.msg_id = m.msg_id) LIMIT @batch::int);

-- name: TakeAnnouncements :many
-- The disablings not yet announced, one dispatcher each (the rows stay
-- locked until they are marked announced, in the same transaction).
SELECT id, tenant, url, coalesce(disabled_reason, '')::text AS reason,
       coalesce(failing_since, disabled_at)::timestamptz AS failing_since, disabled_at::timestamptz AS disabled_at
FROM webhook_endpoints WHERE announce AND NOT enabled AND disabled_at IS NOT NULL
ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED;

-- name: MarkAnnounced :exec
UPDATE webhook_endpoints SET announce = false WHERE id = ANY(@ids::uuid[]);

-- name: Resend :execrows
-- Makes a message to an endpoint due again now, whatever became of it
-- (a delivered one is delivered again, with the same webhook-id); not one
-- being attempted now. An empty tenant is any tenant's.
UPDATE webhook_deliveries d SET state = 'WAITING', next_at = now(), lease_until = NULL, done_at = NULL
FROM webhook_endpoints e
WHERE d.endpoint_id = @endpoint_id AND d.msg_id = @msg_id AND e.id = d.endpoint_id
  AND (@tenant::text = '' OR e.tenant = @tenant::text)
  AND (d.state <> 'WAITING' OR d.lease_until IS NULL);

-- name: Recover :execrows
-- Makes an endpoint's undelivered deliveries noted in [since, until)
-- (until NULL: no end) due again now, oldest first, up to max_rows.
UPDATE webhook_deliveries SET state = 'WAITING', next_at = now(), lease_until = NULL, done_at = NULL
WHERE id IN (SELECT d.id FROM webhook_deliveries d WHERE d.endpoint_id = @endpoint_id AND d.state = 'UNDELIVERED'
             AND d.noted_at >= @since::timestamptz
             AND (sqlc.narg(until)::timestamptz IS NULL OR d.noted_at < sqlc.narg(until)::timestamptz)
             ORDER BY d.noted_at LIMIT @max_rows::int);

-- name: DeliveryLog :many
-- The attempts of a payment's deliveries or of an endpoint's, newest
-- first. A delivery's latest attempt is its own row (last_*); the earlier
-- ones are in webhook_attempts (both branches are probed per delivery by
-- its key: the union is an append the join parameterises).
SELECT x.delivery_id::bigint AS delivery_id, d.endpoint_id, e.url, d.msg_id, m.event_type, x.attempt::int AS attempt,
       x.at::timestamptz AS at, x.status, x.latency_ms::int AS latency_ms, x.error::text AS error,
       x.response::text AS response, d.state
FROM webhook_deliveries d JOIN webhook_messages m ON m.msg_id = d.msg_id JOIN webhook_endpoints e ON e.id = d.endpoint_id
JOIN (
    SELECT l.id AS delivery_id, l.attempts AS attempt, l.last_at AS at, l.last_status AS status,
           coalesce(l.last_latency_ms, 0) AS latency_ms, coalesce(l.last_error, '') AS error, coalesce(l.last_response, '') AS response
    FROM webhook_deliveries l WHERE l.last_at IS NOT NULL
    UNION ALL
    SELECT a.delivery_id, a.attempt, a.at, a.status, a.latency_ms, coalesce(a.error, ''), coalesce(a.response, '')
    FROM webhook_attempts a) x ON x.delivery_id = d.id
WHERE (sqlc.narg(payment_id)::uuid IS NULL OR m.payment_id = sqlc.narg(payment_id)::uuid)
  AND (sqlc.narg(endpoint_id)::uuid IS NULL OR d.endpoint_id = sqlc.narg(endpoint_id)::uuid)
  AND (@tenant::text = '' OR e.tenant = @tenant::text)
ORDER BY x.at DESC LIMIT @max_rows::int;

-- name: AcquireSlots :many
-- Takes, for each endpoint, up to want of the slots below max that are not
-- in its held mask: the candidates are listed first (OFFSET 0 keeps them
-- apart), then locked one by one until want are taken.
SELECT w.e::uuid AS endpoint_id, c.s::int AS slot
FROM (SELECT unnest(@endpoint_ids::uuid[]) AS e, unnest(@maxes::int[]) AS max, unnest(@wants::int[]) AS want,
             unnest(@held::bigint[]) AS held) w
CROSS JOIN LATERAL (
    SELECT f.s FROM (SELECT g.s FROM generate_series(0, w.max - 1) AS g(s)
                     WHERE (w.held >> g.s) & 1 = 0 OFFSET 0) f
    WHERE pg_try_advisory_lock(hashtext(w.e::text), f.s)
    LIMIT w.want) c;

-- name: ReleaseSlots :one
-- Gives back an endpoint's slots; the count of those that were held.
SELECT count(*) FILTER (WHERE pg_advisory_unlock(hashtext(@endpoint_id::text), s))
FROM unnest(@slots::int[]) AS s;

-- name: ChangedEndpoints :many
-- The endpoints changed at or after since, with the database's clock (one
-- row of NULLs beside it when none changed). The dispatcher's cache keeps
-- their secrets to sign with.
SELECT n.at::timestamptz AS as_of, e.id, e.tenant, e.url, e.event_types, e.enabled, e.secrets, e.rotate_until,
       e.max_inflight, e.max_per_second, e.failing_since, e.updated_at
FROM (SELECT now() AS at) n LEFT JOIN webhook_endpoints e ON e.updated_at >= @since::timestamptz;

-- name: ClaimRetries :many
-- Leases, for each endpoint, up to its room of due retries (the lanes say
-- the rooms): work is picked per endpoint, not from one queue in due
-- order, so a backlog at one never blocks another. The leased row's
-- next_at moves to its lease's end, so a dispatcher that dies mid-attempt
-- leaves it due again then (at least once, the same webhook-id).
WITH w AS (
    SELECT unnest(@endpoint_ids::uuid[]) AS e, unnest(@rooms::int[]) AS room
), picked AS (
    SELECT c.id FROM w
    CROSS JOIN LATERAL (
        SELECT d.id FROM webhook_deliveries d
        WHERE d.endpoint_id = w.e AND d.state = 'WAITING' AND d.next_at <= now()
        ORDER BY d.next_at, d.id LIMIT w.room
        FOR UPDATE SKIP LOCKED) c)
UPDATE webhook_deliveries d
SET attempts = d.attempts + 1, lease_until = now() + @lease::interval, next_at = now() + @lease::interval
FROM picked, webhook_messages m
WHERE d.id = picked.id AND m.msg_id = d.msg_id
RETURNING d.id, d.endpoint_id, d.attempts, m.msg_id, m.event_type, m.tenant, m.payment_id, m.body, m.noted_at;

-- name: NextRetries :many
-- Each endpoint's next due retry: one probe of the due index each; an
-- endpoint with none waiting is left out.
SELECT n.endpoint_id::uuid AS endpoint_id, n.next_at::timestamptz AS next_at FROM (
    SELECT e AS endpoint_id,
           (SELECT min(d.next_at) FROM webhook_deliveries d WHERE d.endpoint_id = e AND d.state = 'WAITING') AS next_at
    FROM unnest(@endpoint_ids::uuid[]) AS e) n
WHERE n.next_at IS NOT NULL;
