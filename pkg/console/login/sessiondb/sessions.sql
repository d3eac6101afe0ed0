-- The console's sessions (console_sessions, migration 0014): the
-- statements package login runs, generated into Go by sqlc (make sqlc).

-- name: ForgetEndedSessions :exec
-- Sessions long ended are forgotten as new ones start.
DELETE FROM console_sessions WHERE expires_at < $1;

-- name: RecordSession :exec
INSERT INTO console_sessions (id, operator, name, role, via, created_at, expires_at, checked_at, refresh)
VALUES (@id, @operator, @name, @role, @via, @created_at, @expires_at, @created_at, @refresh);

-- name: LoadSession :one
SELECT id, operator, name, role, via, expires_at, checked_at, refresh FROM console_sessions
WHERE id = $1 AND revoked_at IS NULL;

-- name: ClaimRecheck :one
-- One request rechecks a session's role: the update fenced on the last
-- check picks it.
UPDATE console_sessions SET checked_at = @now WHERE id = @id AND checked_at = @last AND revoked_at IS NULL
RETURNING refresh;

-- name: RecordRecheck :exec
UPDATE console_sessions SET role = $2, name = $3, refresh = $4 WHERE id = $1 AND revoked_at IS NULL;

-- name: RevokeSession :exec
UPDATE console_sessions SET revoked_at = now(), revoked_by = @by::text, refresh = NULL
WHERE id = @id AND revoked_at IS NULL;

-- name: RevokeOperator :execrows
UPDATE console_sessions SET revoked_at = now(), revoked_by = @by::text, refresh = NULL
WHERE operator = @operator AND revoked_at IS NULL;

-- name: ActiveSessions :many
SELECT operator, name, role, via, created_at, checked_at, expires_at, id = @own AS own FROM console_sessions
WHERE revoked_at IS NULL AND expires_at > @now ORDER BY created_at DESC LIMIT 500;
