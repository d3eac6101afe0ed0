-- name: RunningAmounts :many
-- The amounts by currency of the requester's requests that needed no
-- approval within the window (a handful: the policy's window and its caps
-- bound them); package approval counts and sums them.
SELECT amounts FROM console_requests
WHERE requested_by = @who AND NOT needs_approval AND requested_at > now() - @time_window::interval;

-- name: LockOperator :exec
-- One operator's requests are made one after the other: each counts the
-- ones before it.
SELECT pg_advisory_xact_lock(hashtextextended(@operator::text, 7202611303));

-- name: CreateRequest :one
INSERT INTO console_requests (action, ids, filter, amount_total, amount_max, reason, requested_by, requested_name, needs_approval, state,
                              attempts, amounts, run_at, expires_at, via)
VALUES (@action, @ids, @filter, @amount_total, @amount_max, @reason, @requested_by, @requested_name::text, @needs_approval, @state,
        @attempts, @amounts, @run_at, now() + @expiry::interval, @via)
RETURNING id;

-- name: GetRequest :one
SELECT * FROM console_requests WHERE id = @id;

-- name: OpenRequests :many
SELECT * FROM console_requests WHERE state IN ('AWAITING_APPROVAL', 'APPROVED', 'QUEUED', 'RUNNING') ORDER BY id LIMIT 200;

-- name: ClosedRequests :many
SELECT * FROM console_requests WHERE state IN ('DONE', 'REJECTED', 'EXPIRED') ORDER BY id DESC LIMIT 50;

-- name: DecideRequest :one
-- Approves or rejects a request awaiting approval and not expired,
-- comparing identities, never names: two people of one name are two
-- operators, one person renamed is one. The database refuses the
-- requester as decider too (a CHECK), so four eyes hold even against a
-- bug here.
UPDATE console_requests SET state = @state, decided_by = @decided_by::text, decided_name = @decided_name::text, decided_at = now()
WHERE id = @id AND state = 'AWAITING_APPROVAL' AND requested_by <> @decided_by::text AND (expires_at IS NULL OR expires_at > now())
RETURNING id;

-- name: ExpireRequests :many
-- Closes the requests whose time ran out before they ran.
UPDATE console_requests SET state = 'EXPIRED', finished_at = now()
WHERE state IN ('AWAITING_APPROVAL', 'APPROVED', 'QUEUED') AND expires_at <= now()
RETURNING id;

-- name: TakeRequest :one
-- Gives this runner the oldest approved (or queued) request not expired,
-- or one whose runner stopped reporting for 2 minutes, longer than one
-- action may take (it died: its progress is kept, and the actions it did
-- are fenced and probe-first, so doing one again is safe). just, when not
-- 0, takes that request only.
UPDATE console_requests SET state = 'RUNNING', runner = @runner::text, heartbeat_at = now()
WHERE id = (SELECT r.id FROM console_requests r
            WHERE (@just::bigint = 0 OR r.id = @just::bigint)
              AND ((r.state IN ('APPROVED', 'QUEUED') AND (r.expires_at IS NULL OR r.expires_at > now()))
                   OR (r.state = 'RUNNING' AND r.heartbeat_at < now() - interval '2 minutes'))
            ORDER BY r.id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING *;

-- name: RecordProgress :exec
UPDATE console_requests SET done = @done, failed = @failed, errors = @errors, heartbeat_at = now(),
       state = CASE WHEN @finished::boolean THEN 'DONE' ELSE state END,
       finished_at = CASE WHEN @finished::boolean THEN now() END, skipped = @skipped
WHERE id = @id AND runner = @runner::text;

-- name: CreateLimitRequest :one
INSERT INTO tenant_limit_requests (tenant, weight, max_inflight, max_rate, reason, requested_by, requested_name, expires_at)
VALUES (@tenant, @weight, @max_inflight, @max_rate, @reason, @requested_by, @requested_name, now() + @expiry::interval)
RETURNING id;

-- name: DecideLimitRequest :one
-- Approves (APPLIED) or rejects a waiting, unexpired request, never the
-- requester's own (compared by identity; a CHECK holds it too). only_tenant,
-- when set, must be the request's.
UPDATE tenant_limit_requests SET state = @state, decided_by = @decided_by::text, decided_name = @decided_name::text, decided_at = now()
WHERE id = @id AND (@only_tenant::text = '' OR tenant = @only_tenant::text) AND state = 'AWAITING_APPROVAL'
  AND requested_by <> @decided_by::text AND (expires_at IS NULL OR expires_at > now())
RETURNING tenant, weight, max_inflight, max_rate, requested_name;

-- name: NameLimitRequest :exec
-- Names the request to the database for the rest of the transaction
-- (0026 refuses the admin role's write of tenant_limits otherwise).
SELECT set_config('paysched.limit_request', @id::text, true);

-- name: GetLimitRequest :one
SELECT * FROM tenant_limit_requests WHERE id = @id;

-- name: OpenLimitRequests :many
SELECT * FROM tenant_limit_requests WHERE state = 'AWAITING_APPROVAL' ORDER BY id LIMIT 200;

-- name: ClosedLimitRequests :many
SELECT * FROM tenant_limit_requests WHERE state <> 'AWAITING_APPROVAL' ORDER BY id DESC LIMIT 50;

-- name: ExpireLimitRequests :exec
UPDATE tenant_limit_requests SET state = 'EXPIRED' WHERE state = 'AWAITING_APPROVAL' AND expires_at <= now();

-- name: CreateEndpointRequest :one
INSERT INTO endpoint_requests (action, endpoint_id, overlap_seconds, since, until, reason, requested_by, requested_name, expires_at)
VALUES (@action, @endpoint_id, @overlap_seconds, @since, @until, @reason, @requested_by, @requested_name, now() + @expiry::interval)
RETURNING id;

-- name: GetEndpointRequest :one
SELECT * FROM endpoint_requests WHERE id = @id;

-- name: OpenEndpointRequests :many
SELECT * FROM endpoint_requests WHERE state = 'AWAITING_APPROVAL' ORDER BY id LIMIT 200;

-- name: ClosedEndpointRequests :many
SELECT * FROM endpoint_requests WHERE state <> 'AWAITING_APPROVAL' ORDER BY id DESC LIMIT 50;

-- name: EndpointRequestsOf :many
SELECT * FROM endpoint_requests WHERE endpoint_id = @endpoint_id ORDER BY id DESC LIMIT 20;

-- name: DecideEndpointRequest :one
-- Decides a waiting, unexpired request, never the requester's own (a
-- CHECK holds it too).
UPDATE endpoint_requests SET state = @state, decided_by = @decided_by::text, decided_name = @decided_name::text, decided_at = now()
WHERE id = @id AND state = 'AWAITING_APPROVAL' AND requested_by <> @decided_by::text AND expires_at > now()
RETURNING *;

-- name: EndpointRequestNotApplied :exec
UPDATE endpoint_requests SET state = 'NOT_APPLIED', error = @error::text WHERE id = @id;

-- name: EndpointRequestRecovered :exec
UPDATE endpoint_requests SET recovered = @recovered::bigint WHERE id = @id;

-- name: ExpireEndpointRequests :exec
UPDATE endpoint_requests SET state = 'EXPIRED' WHERE state = 'AWAITING_APPROVAL' AND expires_at <= now();

-- name: CreateScheduleRequest :one
INSERT INTO schedule_requests (action, schedule_id, resume_at, reason, requested_by, requested_name, expires_at)
VALUES (@action, @schedule_id, @resume_at, @reason, @requested_by, @requested_name, now() + @expiry::interval)
RETURNING id;

-- name: DecideScheduleRequest :one
-- Approves or rejects a waiting, unexpired request, never the requester's
-- own (by identity; a CHECK holds it too).
UPDATE schedule_requests SET state = @state, decided_by = @decided_by::text, decided_name = @decided_name::text, decided_at = now()
WHERE id = @id AND state = 'AWAITING_APPROVAL' AND requested_by <> @decided_by::text AND expires_at > now()
RETURNING id;

-- name: GetScheduleRequest :one
SELECT * FROM schedule_requests WHERE id = @id;

-- name: OpenScheduleRequests :many
-- Of one schedule, or of all when schedule_id is the nil uuid.
SELECT * FROM schedule_requests
WHERE state IN ('AWAITING_APPROVAL', 'APPROVED')
  AND (@schedule_id::uuid = '00000000-0000-0000-0000-000000000000'::uuid OR schedule_id = @schedule_id::uuid)
ORDER BY id LIMIT 200;

-- name: ClosedScheduleRequests :many
SELECT * FROM schedule_requests
WHERE state NOT IN ('AWAITING_APPROVAL', 'APPROVED')
  AND (@schedule_id::uuid = '00000000-0000-0000-0000-000000000000'::uuid OR schedule_id = @schedule_id::uuid)
ORDER BY id DESC LIMIT 50;

-- name: ExpireScheduleRequests :exec
UPDATE schedule_requests SET state = 'EXPIRED' WHERE state IN ('AWAITING_APPROVAL', 'APPROVED') AND expires_at <= now();
