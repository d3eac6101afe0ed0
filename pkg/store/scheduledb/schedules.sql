-- The recurring schedules (schedules, schedule_occurrences,
-- schedule_events and schedule_requests, migrations 0029 to 0032): the
-- statements package store runs for the payer's API, the planner, the
-- operators' requests and the console, generated into Go by sqlc (make
-- sqlc). Every statement that returns a schedule returns its whole row
-- (sqlc spells the columns out), so each returns a Schedule.

-- name: CreateSchedule :one
-- Writes a schedule, unless the payer's idempotency key already names one
-- (then nothing: ScheduleByKey reads that one). A schedule whose rule
-- makes no occurrence (no next instant) is written ENDED.
INSERT INTO schedules (id, tenant, payer, payee, amount_minor, currency, description, metadata, rrule, start_local,
                       time_zone, month_end, business_days, calendar, catch_up, catch_up_bound, next_at,
                       idempotency_key, request_hash, state, last_occurrence, last_index)
VALUES (@id, @tenant, @payer, @payee, @amount_minor, @currency, @description, @metadata::jsonb, @rrule, @start_local,
        @time_zone, @month_end, @business_days, @calendar, @catch_up, @catch_up_bound, sqlc.narg(next_at)::timestamptz,
        nullif(@idempotency_key::text, ''), @request_hash,
        CASE WHEN sqlc.narg(next_at)::timestamptz IS NULL THEN 'ENDED' ELSE 'ACTIVE' END,
        nullif(@last_occurrence::text, ''), @last_index)
ON CONFLICT (payer, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *;

-- name: ScheduleByKey :one
-- The schedule the payer's idempotency key names.
SELECT * FROM schedules WHERE payer = @payer::text AND idempotency_key = @idempotency_key::text;

-- name: GetSchedule :one
-- A payer's schedule (any payer's when payer is empty).
SELECT * FROM schedules WHERE id = @id AND (@payer::text = '' OR payer = @payer::text);

-- name: ListSchedules :many
-- Pages through a payer's schedules, newest first, before the seq of the
-- last one read (0: from the newest).
SELECT * FROM schedules
WHERE payer = @payer::text AND (@before::bigint = 0 OR seq < @before::bigint)
ORDER BY seq DESC LIMIT @max_rows::bigint;

-- name: PauseSchedule :one
-- Pauses an active schedule until its resume time (NULL: until resumed)
-- and locks its row for the rest of the transaction.
UPDATE schedules SET state = 'PAUSED', resume_at = sqlc.narg(resume_at)::timestamptz, updated_at = now()
WHERE id = @id AND (@payer::text = '' OR payer = @payer::text) AND state = 'ACTIVE'
RETURNING *;

-- name: CancelSchedule :one
-- Ends an active or paused schedule for good and locks its row for the
-- rest of the transaction.
UPDATE schedules SET state = 'CANCELLED', resume_at = NULL, next_at = NULL, updated_at = now()
WHERE id = @id AND (@payer::text = '' OR payer = @payer::text) AND state IN ('ACTIVE', 'PAUSED')
RETURNING *;

-- name: ResumeSchedule :one
-- Resumes a paused schedule and asks the planner to look at it at once
-- (next_at the caller's now): what it missed meanwhile follows its
-- catch-up policy.
UPDATE schedules SET state = 'ACTIVE', resume_at = NULL, next_at = @next_at::timestamptz, updated_at = now()
WHERE id = @id AND (@payer::text = '' OR payer = @payer::text) AND state = 'PAUSED'
RETURNING *;

-- name: UpdateSchedule :one
-- Replaces an active or paused schedule's payment and plan, and sets its
-- place to the new plan's (the occurrences before now are behind it, none
-- is caught up); a paused one is looked at by the planner at once. Its row
-- stays locked for the rest of the transaction.
UPDATE schedules SET payee = @payee::text, amount_minor = @amount_minor::bigint, currency = @currency::text,
       description = @description::text, metadata = @metadata::jsonb, rrule = @rrule::text,
       start_local = @start_local::text, time_zone = @time_zone::text, month_end = @month_end::text,
       business_days = @business_days::text, calendar = @calendar::text, catch_up = @catch_up::text,
       catch_up_bound = @catch_up_bound::int, last_occurrence = nullif(@last_occurrence::text, ''),
       last_index = @last_index::int,
       next_at = CASE WHEN state = 'ACTIVE' THEN sqlc.narg(next_at)::timestamptz ELSE now() END, updated_at = now()
WHERE id = @id AND (@payer::text = '' OR payer = @payer::text) AND state IN ('ACTIVE', 'PAUSED')
RETURNING *;

-- name: Withdraw :execrows
-- Cancels a schedule's occurrences made ahead (due after cutoff, the
-- caller's now) and not yet claimed, and releases their keys, so a resume
-- makes them again; it counts the keys released.
--
-- Why it is safe: each payment is cancelled as the payer's cancel is, from
-- PENDING only and not probe_first, on its own partition (due_time), so a
-- claimed one, or one an earlier attempt may have charged, is left to run;
-- only the keys of payments this statement cancelled are released, in the
-- same statement, so no key is freed whose payment may still charge.
WITH made AS (
    SELECT occurrence, payment_id, due_time FROM schedule_occurrences
    WHERE schedule_id = @schedule_id::uuid AND due_time > @cutoff::timestamptz
), cancelled AS (
    UPDATE payments p SET status = 'CANCELLED', updated_at = now()
    FROM made m
    WHERE p.id = m.payment_id AND p.due_time = m.due_time AND p.status = 'PENDING' AND NOT p.probe_first
    RETURNING m.occurrence
)
DELETE FROM schedule_occurrences o USING cancelled c
WHERE o.schedule_id = @schedule_id::uuid AND o.occurrence = c.occurrence;

-- name: PlaceBack :exec
-- Moves a schedule's place back to its latest occurrence still made,
-- after a withdrawal (keys sort as the nominal times do).
UPDATE schedules s SET last_occurrence = l.occurrence, last_index = coalesce(l.idx, 0)
FROM (SELECT NULL) AS one
LEFT JOIN LATERAL (SELECT so.occurrence, so.idx FROM schedule_occurrences so WHERE so.schedule_id = @id::uuid
                   ORDER BY so.occurrence DESC LIMIT 1) l ON true
WHERE s.id = @id::uuid;

-- name: DueSchedules :many
-- Takes the schedules the planner has work on: active ones whose next
-- occurrence falls due within the horizon, and paused ones whose resume
-- time has come. SKIP LOCKED gives two planners disjoint schedules; the
-- lock is held until the planner's transaction ends, so a schedule's
-- occurrences and its place move together or not at all.
SELECT * FROM schedules
WHERE (state = 'ACTIVE' AND next_at <= @horizon::timestamptz) OR (state = 'PAUSED' AND resume_at <= @resume_by::timestamptz)
ORDER BY next_at NULLS FIRST
LIMIT @max_rows::bigint
FOR UPDATE SKIP LOCKED;

-- name: MakeOccurrences :execrows
-- Writes occurrence payments: a schedule_occurrences row, the
-- payment_index row and the payment, with the schedule's fields as they
-- are now (a change of amount applies to what is made after it). The
-- arrays are parallel, one element per occurrence; it counts the payments
-- made. The schedule and payment ids are pg_catalog.uuid so that they
-- encode as [16]byte arrays, without reflection (sqlc.yaml).
--
-- Why it is safe: the occurrence's key row, its index row and its payment
-- are written by one statement, so all or none exist; ON CONFLICT on the
-- key's primary key makes an occurrence already made (by another planner,
-- or before a crash whose transaction did commit) write nothing, and only
-- the rows whose key was new (RETURNING) become payments. Rows go in key
-- order so two overlapping batches lock keys in the same order. The
-- payments are PENDING and untouched, created as the client, which the
-- payment guard requires of every insert.
WITH input AS (
    SELECT unnest(@schedule_ids::pg_catalog.uuid[]) AS schedule_id, unnest(@occurrences::text[]) AS occurrence,
           unnest(@payment_ids::pg_catalog.uuid[]) AS id, unnest(@due_times::timestamptz[]) AS due_time,
           unnest(@idxs::int[]) AS idx, unnest(@zone_rules::text[]) AS rules
), occ AS (
    INSERT INTO schedule_occurrences (schedule_id, occurrence, payment_id, due_time, idx, rules)
    SELECT i.schedule_id, i.occurrence, i.id, i.due_time, i.idx, nullif(i.rules, '') FROM input i
    ORDER BY i.schedule_id, i.occurrence
    ON CONFLICT (schedule_id, occurrence) DO NOTHING
    RETURNING payment_id
), src AS (
    SELECT i.id, i.schedule_id, i.occurrence, i.due_time, s.payer, s.payee, s.amount_minor, s.currency,
           s.description, s.metadata, s.tenant
    FROM input i JOIN occ ON occ.payment_id = i.id JOIN schedules s ON s.id = i.schedule_id
), idx AS (
    INSERT INTO payment_index (id, payer, payee, due_time, created_at, tenant, currency, amount_minor)
    SELECT src.id, src.payer, src.payee, src.due_time, now(), src.tenant, src.currency, src.amount_minor FROM src
    RETURNING id
)
INSERT INTO payments (id, payer, payee, amount_minor, currency, due_time, run_at, status, description, metadata,
                      created_at, updated_at, tenant, schedule_id, occurrence)
SELECT s.id, s.payer, s.payee, s.amount_minor, s.currency, s.due_time, s.due_time, 'PENDING', s.description, s.metadata,
       now(), now(), s.tenant, s.schedule_id, s.occurrence
FROM src s JOIN idx USING (id)
RETURNING id;

-- name: SetPlanned :exec
-- Moves schedules' places (parallel arrays, one element per schedule;
-- has_next false: no next instant, the rule has ended, and next_at is
-- NULL). The planner holds each row's
-- lock (DueSchedules), so nothing moved them meanwhile; a schedule paused
-- or cancelled since is not locked by it and so not among them. The
-- statement names the planner as the actor of the schedule events it
-- causes (an end; a pause's resume time come): the setting is local to
-- the planner's transaction, and the events' trigger reads it at the
-- statement's end. The ids are pg_catalog.uuid, as MakeOccurrences' are,
-- and the next instants plain with a flag beside them: pgx encodes arrays
-- of [16]byte, time.Time and bool without reflection, an array of
-- pointers (NULL elements) not.
WITH actor AS (SELECT set_config('paysched.actor', 'planner', true) AS who)
UPDATE schedules s SET last_occurrence = nullif(p.last_occurrence, ''), last_index = p.last_index,
       next_at = CASE WHEN p.has_next THEN p.next_at END,
       state = p.state, resume_at = CASE WHEN p.state = 'ACTIVE' THEN NULL ELSE s.resume_at END, updated_at = now()
FROM actor, (SELECT unnest(@ids::pg_catalog.uuid[]) AS id, unnest(@last_occurrences::text[]) AS last_occurrence,
                    unnest(@last_indexes::int[]) AS last_index, unnest(@next_ats::timestamptz[]) AS next_at,
                    unnest(@has_next::bool[]) AS has_next, unnest(@states::text[]) AS state) AS p
WHERE s.id = p.id AND actor.who = 'planner';

-- name: ScheduleOccurrences :many
-- A schedule's occurrences made, newest first.
SELECT o.occurrence, o.idx, o.payment_id, o.due_time
FROM schedule_occurrences o WHERE o.schedule_id = @schedule_id::uuid
ORDER BY o.occurrence DESC LIMIT @max_rows::bigint;

-- name: AllSchedules :many
-- Pages through every payer's schedules for the console, newest first,
-- before a seq, in a state (empty for any), down schedules_seq_idx.
SELECT * FROM schedules
WHERE seq < @before::bigint AND (@in_state::text = '' OR state = @in_state::text)
ORDER BY seq DESC LIMIT @max_rows::bigint;

-- name: TenantSchedules :many
-- AllSchedules for one tenant, down its range of schedules_tenant_seq_idx.
SELECT * FROM schedules
WHERE tenant = @tenant::text AND seq < @before::bigint AND (@in_state::text = '' OR state = @in_state::text)
ORDER BY tenant, seq DESC LIMIT @max_rows::bigint;

-- name: ActiveSchedules :many
-- Walks the active schedules by id, for the forecast.
SELECT * FROM schedules
WHERE state = 'ACTIVE' AND id > @after_id::uuid ORDER BY id LIMIT @max_rows::bigint;

-- name: ScheduleHistory :many
-- A schedule's occurrences made, newest first, with their payments'
-- status (empty when the payment is gone to retention; each payment found by
-- its id and due time, so one partition is read per row).
SELECT o.occurrence, o.idx, o.payment_id, o.due_time, coalesce(p.status, '')::text AS status
FROM schedule_occurrences o
LEFT JOIN payments p ON p.id = o.payment_id AND p.due_time = o.due_time
WHERE o.schedule_id = @schedule_id::uuid
ORDER BY o.occurrence DESC LIMIT @max_rows::bigint;

-- name: ScheduleEvents :many
-- A schedule's events, newest first.
SELECT id, kind, actor, at FROM schedule_events WHERE schedule_id = @schedule_id::uuid
ORDER BY id DESC LIMIT @max_rows::bigint;

-- name: PendingByWeek :many
-- What is made and still to run, per week from a start (week 0 starts
-- then) and currency, for a number of weeks: a range of the sweep index
-- (PENDING rows by run_at), bounded by due time for partition pruning.
SELECT floor(extract(epoch FROM run_at - @from_at::timestamptz) / 604800)::int AS week, currency,
       count(*) AS n, sum(amount_minor)::bigint AS amount
FROM payments
WHERE status = 'PENDING' AND run_at >= @from_at::timestamptz
  AND run_at < make_interval(weeks => @weeks::int) + @from_at::timestamptz AND due_time <= @due_bound::timestamptz
GROUP BY 1, 2;

-- name: NextApprovedRequest :one
-- Takes the oldest approved operator request on a schedule still in time,
-- locked: two planners never apply one twice.
SELECT id, action, schedule_id, resume_at, requested_name, decided_name FROM schedule_requests
WHERE state = 'APPROVED' AND expires_at > now()
ORDER BY id LIMIT 1
FOR UPDATE SKIP LOCKED;

-- name: NameActor :exec
-- Names who changes schedules for the rest of the transaction: the
-- schedule events' trigger reads it (0030).
SELECT set_config('paysched.actor', @actor::text, true);

-- name: FailRequest :exec
-- Closes an approved request that failed to apply as NOT_APPLIED, with
-- the error, so it does not stop the ones after it.
UPDATE schedule_requests SET state = 'NOT_APPLIED', applied_at = now(), error = left(@why::text, 500)
WHERE id = @id::bigint AND state = 'APPROVED';

-- name: CloseRequest :exec
-- Records what applying a request did: its state, the occurrences it
-- withdrew and why it did not apply (empty when it did).
UPDATE schedule_requests SET state = @new_state::text, applied_at = now(), withdrawn = @withdrawn::int,
       error = nullif(@why::text, '')
WHERE id = @id::bigint;

-- name: ActiveZones :many
-- The zones of the active schedules, each once.
SELECT DISTINCT time_zone FROM schedules WHERE state = 'ACTIVE';

-- name: AheadWithOtherRules :many
-- Occurrences made ahead (due after cutoff) of the active schedules in
-- each zone whose recorded zone rules are not that zone's (zones and
-- zone_rules are parallel arrays), whose payments are still PENDING, never
-- claimed and not moved by an operator (run_at still their due time):
-- what a change of zone rules may have moved. One statement for every
-- zone.
SELECT o.schedule_id, o.occurrence, o.idx, o.payment_id, o.due_time, coalesce(o.rules, '')::text AS rules
FROM (SELECT unnest(@zones::text[]) AS zone, unnest(@zone_rules::text[]) AS rules) AS z
JOIN schedules s ON s.time_zone = z.zone AND s.state = 'ACTIVE'
JOIN schedule_occurrences o ON o.schedule_id = s.id AND o.due_time > @cutoff::timestamptz AND o.rules IS DISTINCT FROM z.rules
JOIN payments p ON p.id = o.payment_id AND p.due_time = o.due_time
WHERE p.status = 'PENDING' AND NOT p.probe_first AND p.run_at = p.due_time
ORDER BY o.schedule_id, o.occurrence
LIMIT @max_rows::bigint;

-- name: SchedulesByID :many
-- The schedules of a list of ids (each once, whatever the list repeats).
SELECT * FROM schedules WHERE id IN (SELECT DISTINCT u.schedule_id FROM unnest(@ids::uuid[]) AS u(schedule_id));

-- name: StampRules :exec
-- Records that occurrences (schedule and key, parallel arrays) still fall
-- due when they were made for under the zone rules each carries.
UPDATE schedule_occurrences o SET rules = i.rules
FROM (SELECT unnest(@schedule_ids::uuid[]) AS schedule_id, unnest(@occurrences::text[]) AS occurrence,
             unnest(@zone_rules::text[]) AS rules) AS i
WHERE o.schedule_id = i.schedule_id AND o.occurrence = i.occurrence;

-- name: LockActive :many
-- Locks the active ones of a list of schedules, in id order (so two
-- callers lock in the same order), for the rest of the transaction.
SELECT id FROM schedules WHERE id = ANY (@ids::uuid[]) AND state = 'ACTIVE' ORDER BY id FOR UPDATE;

-- name: WithdrawKeys :many
-- Withdraws the named occurrences (schedule, key and the payment read for
-- it, parallel arrays) as a pause withdraws them, and returns the keys it
-- released.
--
-- Why it is safe: as Withdraw, each payment is cancelled from PENDING
-- only and not probe_first, so one a sweeper claimed (or that may have
-- charged) is left to run at the time it was made for, and only while its
-- run time is still its due time (one an operator rescheduled since it was
-- read is left alone too), and only the keys of the payments cancelled
-- here are released, in the same statement.
WITH input AS (
    SELECT unnest(@schedule_ids::uuid[]) AS schedule_id, unnest(@occurrences::text[]) AS occurrence,
           unnest(@payment_ids::uuid[]) AS payment_id
), made AS (
    SELECT o.schedule_id, o.occurrence, o.payment_id, o.due_time
    FROM schedule_occurrences o JOIN input i USING (schedule_id, occurrence, payment_id)
), cancelled AS (
    UPDATE payments p SET status = 'CANCELLED', updated_at = now()
    FROM made m
    WHERE p.id = m.payment_id AND p.due_time = m.due_time AND p.status = 'PENDING' AND NOT p.probe_first
      AND p.run_at = p.due_time
    RETURNING m.schedule_id, m.occurrence
)
DELETE FROM schedule_occurrences o USING cancelled c
WHERE o.schedule_id = c.schedule_id AND o.occurrence = c.occurrence
RETURNING o.schedule_id, o.occurrence;
