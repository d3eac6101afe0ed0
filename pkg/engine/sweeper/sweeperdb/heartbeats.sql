-- What the sweepers report of themselves for the operator console
-- (engine_heartbeats and breaker_changes, migration 0014), generated into
-- Go by sqlc (make sqlc).

-- name: Heartbeat :exec
-- One row per sweeper: what it last saw.
INSERT INTO engine_heartbeats (process, kind, info, seen_at) VALUES (@process, 'sweeper', @info, now())
ON CONFLICT (process) DO UPDATE SET kind = EXCLUDED.kind, info = EXCLUDED.info, seen_at = EXCLUDED.seen_at;

-- name: BreakerChange :exec
-- The breaker opening or closing (rare: one row per change).
INSERT INTO breaker_changes (process, open) VALUES (@process, @open);
