-- The token buckets (rate_buckets, migration 0002 and 0013) package
-- pacing takes from, generated into Go by sqlc (make sqlc).

-- name: Refill :one
-- Refills the cluster-wide bucket at its rate (tokens/s) up to its burst and
-- returns what it holds; the caller spends from it in the same
-- transaction. The row lock serializes sweepers, so the whole cluster
-- together never takes more than the rate allows.
INSERT INTO rate_buckets AS b (name, tokens, refreshed_at) VALUES (sqlc.arg(name), sqlc.arg(burst)::float8, clock_timestamp())
ON CONFLICT (name) DO UPDATE
SET tokens = LEAST(sqlc.arg(burst)::float8, b.tokens + sqlc.arg(rate)::float8 * extract(epoch FROM clock_timestamp() - b.refreshed_at)),
    refreshed_at = clock_timestamp()
RETURNING tokens;

-- name: Spend :exec
UPDATE rate_buckets SET tokens = tokens - @n::float8 WHERE name = @name;

-- name: Refund :exec
UPDATE rate_buckets SET tokens = LEAST(@burst::float8, tokens + @n::float8) WHERE name = @name;

-- name: EnsureBuckets :exec
-- Makes the buckets missing, full, in name order.
INSERT INTO rate_buckets (name, tokens, refreshed_at)
SELECT u.n, u.b, clock_timestamp() FROM (SELECT unnest(@names::text[]) AS n, unnest(@bursts::float8[]) AS b) u ORDER BY u.n
ON CONFLICT (name) DO NOTHING;

-- name: LockBuckets :many
-- Locks the buckets in name order (no two sweepers deadlock) and says what
-- each holds and how long since its refill.
SELECT name, tokens, extract(epoch FROM clock_timestamp() - refreshed_at)::float8 AS elapsed, clock_timestamp()::timestamptz AS now
FROM rate_buckets WHERE name = ANY(@names::text[]) ORDER BY name FOR UPDATE;

-- name: SetBuckets :exec
UPDATE rate_buckets b SET tokens = u.t, refreshed_at = @now::timestamptz
FROM (SELECT unnest(@names::text[]) AS n, unnest(@tokens::float8[]) AS t) u WHERE b.name = u.n;

-- name: LockBucketNames :exec
SELECT 1 FROM rate_buckets WHERE name = ANY(@names::text[]) ORDER BY name FOR UPDATE;

-- name: RefundBuckets :exec
UPDATE rate_buckets b SET tokens = LEAST(u.burst, b.tokens + u.back)
FROM (SELECT unnest(@names::text[]) AS n, unnest(@back::float8[]) AS back, unnest(@bursts::float8[]) AS burst) u WHERE b.name = u.n;
