package console

import "github.com/paysched/paysched/pkg/payment"

// The console's reads, together: every statement its pages run to show
// the schedule, the engine and the books. Each is bounded (a LIMIT, an
// index range or a cap) because a page must answer within pageTimeout at
// any size; TestSearchPlansAreIndexedAndBounded prints the plans of the
// searches. The console's own tables (requests, sessions) are read beside
// the statements that write them, in package approval and sessionstore.go.

// cappedCountSQL counts one open status's rows through its partial index
// (sweep, lease, dead letters), stopping at the cap. The status is in the
// text, not a parameter: a partial index needs it when the plan is made.
func cappedCountSQL(s payment.Status) string {
	return `SELECT count(*) FROM (SELECT 1 FROM payments WHERE status = ` + lit(s) + ` LIMIT $1) s`
}

// The statuses' and outcomes' literals the console's statements name.
const (
	pending   = "'" + string(payment.Pending) + "'"
	dead      = "'" + string(payment.DeadLettered) + "'"
	failed    = "'" + string(payment.Failed) + "'"
	succeeded = "'" + string(payment.Succeeded) + "'"
	declined  = "'" + string(payment.Declined) + "'"
	retryable = "'" + string(payment.Retryable) + "'"
	ambiguous = "'" + string(payment.Ambiguous) + "'"
)

// estimateSQL estimates the rows of each status from the planner's
// statistics of each partition (reltuples times the status's frequency):
// no scan at all, as fresh as autovacuum's last analyze. Only the split
// between the statuses at rest comes from it; how many rows there are
// comes from liveSQL, which the server keeps current.
const estimateSQL = `
SELECT s.v, sum(c.reltuples * s.f)::bigint
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = c.relname AND st.attname = 'status' AND NOT st.inherited
CROSS JOIN LATERAL unnest(st.most_common_vals::text::text[], st.most_common_freqs) AS s(v, f)
WHERE i.inhparent = 'payments'::regclass AND c.reltuples > 0
GROUP BY s.v`

// liveSQL is how many rows the partitions hold, from the statistics the
// server updates at each commit (no scan).
const liveSQL = `
SELECT coalesce(sum(t.n_live_tup), 0)::bigint
FROM pg_inherits i JOIN pg_stat_user_tables t ON t.relid = i.inhrelid
WHERE i.inhparent = 'payments'::regclass`

// forecastSQL is what falls due in the next 24 h, per minute and
// currency: a range of the sweep index (PENDING rows by run_at).
const forecastSQL = `
SELECT date_trunc('minute', run_at) AS m, currency, count(*), sum(amount_minor)::bigint
FROM payments
WHERE status = ` + pending + ` AND run_at >= date_trunc('minute', now()) AND run_at < now() + interval '24 hours'
  AND due_time <= $1
GROUP BY 1, 2 ORDER BY 1`

// sampleSQL summarises the attempts started in ($1, $2]: through the BRIN
// on started_at, joined to payment_index for the due time.
const sampleSQL = `
SELECT count(*) FILTER (WHERE a.outcome IS NOT NULL),
       count(*) FILTER (WHERE a.outcome = ` + succeeded + `),
       count(*) FILTER (WHERE a.outcome = ` + declined + `),
       count(*) FILTER (WHERE a.outcome = ` + retryable + `),
       count(*) FILTER (WHERE a.outcome = ` + ambiguous + `),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - i.due_time)) FILTER (WHERE a.attempt = 1), 0),
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM a.started_at - i.due_time)) FILTER (WHERE a.attempt = 1), 0)
FROM payment_attempts a JOIN payment_index i ON i.id = a.payment_id
WHERE a.started_at > $1 AND a.started_at <= $2`

// tenantRateSQL is the attempts finished in ($1, $2] per tenant: the same
// BRIN range as sampleSQL, grouped by the tenant payment_index keeps
// (version 22), the busiest first and at most maxTenantRates of them.
const tenantRateSQL = `
SELECT i.tenant, count(*)
FROM payment_attempts a JOIN payment_index i ON i.id = a.payment_id
WHERE a.started_at > $1 AND a.started_at <= $2 AND a.outcome IS NOT NULL AND i.tenant IS NOT NULL
GROUP BY i.tenant ORDER BY 2 DESC LIMIT $3`

// The candidate walks, one per shape of search; each is one index range,
// and returns (id, due_time, kept).
const (
	byIDSQL    = `SELECT id, due_time, true FROM payment_index WHERE id = $1`
	byKeySQL   = `SELECT id, due_time, true FROM payment_index WHERE payer = $1 AND idempotency_key = $2`
	byPayerSQL = `
SELECT id, due_time, true FROM payment_index
WHERE payer = $1 AND (due_time, id) > ($2, $3) AND due_time < $4
ORDER BY due_time, id LIMIT $5`
	byPayeeSQL = `
SELECT id, due_time, true FROM payment_index
WHERE payee = $1 AND (due_time, id) > ($2, $3) AND due_time < $4
ORDER BY due_time, id LIMIT $5`
	byTenantSQL = `
SELECT id, due_time, true FROM payment_index
WHERE tenant = $1 AND (due_time, id) > ($2, $3) AND due_time < $4
ORDER BY due_time, id LIMIT $5`
	// byRefSQL finds the payments whose attempts got ref: a charge ref is
	// one payment's, so this is a lookup, bounded as every walk is.
	byRefSQL = `
SELECT DISTINCT i.id, i.due_time, true FROM payment_attempts a JOIN payment_index i ON i.id = a.payment_id
WHERE a.gateway_ref = $1 AND (i.due_time, i.id) > ($2, $3) AND i.due_time < $4
ORDER BY i.due_time, i.id LIMIT $5`
	// byCurrencySQL walks one currency's payments by due time, and says of
	// each entry whether its amount is within [$6, $7]: the walk's bound
	// is on entries looked at, kept or not, and the cursor goes on from
	// the last one looked at.
	byCurrencySQL = `
SELECT id, due_time, amount_minor BETWEEN $6 AND $7 FROM payment_index
WHERE currency = $1 AND (due_time, id) > ($2, $3) AND due_time < $4
ORDER BY due_time, id LIMIT $5`
	byDueSQL = `
SELECT id, due_time, true FROM payment_index
WHERE (due_time, id) > ($1, $2) AND due_time < $3
ORDER BY due_time, id LIMIT $4`
	// rowsSQL reads the candidates' payments by primary key. An id is
	// unique, so id = ANY and due_time = ANY match exactly the candidates.
	// The due range [$10, $11] (the first and last candidates', in walk
	// order) prunes the partitions to the candidates' days: a plan prunes
	// on an array only when planned for its values, and once pgx's
	// prepared statement runs on a generic plan (after five runs), every
	// partition of the month was probed for every id (an export of 10,000
	// rows: 0.9 s at 5M). A range of parameters prunes at executor start.
	rowsSQL = `
SELECT ` + rowCols + `
FROM payments p
WHERE p.id = ANY($1::uuid[]) AND p.due_time = ANY($2::timestamptz[])
  AND p.due_time BETWEEN $10 AND $11
  AND ($3 = '' OR p.status = $3)
  AND ($4 = '' OR p.payee = $4)
  AND ($5 = '' OR p.currency = $5)
  AND p.amount_minor BETWEEN $6 AND $7
  AND ($8 = '' OR coalesce(p.failure_reason, p.dead_letter_reason) = $8)
  AND ($9 = '' OR p.tenant = $9)
ORDER BY p.due_time, p.id`
)

// rowCols are the columns scanRow reads, of payments p.
const rowCols = `p.id, p.payer, p.payee, p.amount_minor, p.currency, p.due_time, p.status, p.attempt,
       coalesce(p.dead_letter_reason, p.failure_reason, ''), p.tenant`

// deadWalkSQL walks the dead letters after ($1, $2) and due before $3 in
// (due_time, id) order through their partial index; failedWalkSQL the
// failed payments, through theirs (version 22).
var (
	deadWalkSQL   = atRestWalkSQL(dead)
	failedWalkSQL = atRestWalkSQL(failed)
)

// atRestWalkSQL is the walk of the payments in status (a literal with a
// partial index on (due_time, id)), at most $4.
func atRestWalkSQL(status string) string {
	return `
SELECT ` + rowCols + `
FROM payments p
WHERE p.status = ` + status + ` AND (p.due_time, p.id) > ($1, $2) AND p.due_time < $3
ORDER BY p.due_time, p.id
LIMIT $4`
}

// deadCountSQL counts the dead letters (of reason $1, or all) and their
// amount, at most $2 of them.
const deadCountSQL = `
SELECT count(*), coalesce(sum(amount_minor), 0)::bigint FROM (
  SELECT amount_minor FROM payments WHERE status = ` + dead + ` AND due_time <= now() AND ($1 = '' OR dead_letter_reason = $1)
  LIMIT $2) s`

// tenantDeadSQL is a tenant's latest dead letters: the last 2,000 dead
// letters through their index, of which the tenant's (bounded, whatever
// the tenant).
const tenantDeadSQL = `
SELECT ` + rowCols + ` FROM (
  SELECT * FROM payments WHERE status = ` + dead + ` AND due_time <= now() AND due_time <= $2
  ORDER BY due_time DESC, id DESC LIMIT 2000) p
WHERE p.tenant = $1 ORDER BY p.due_time DESC, p.id DESC LIMIT 20`

// actionsSQL reads one page: at most $6 (actionsScan) rows back from the
// cursor $1 by the primary key, of which those matching the filters ($2
// actor prefix, $3 action, $4 since), at most $5.
const actionsSQL = `
SELECT id, at, payment_id, actor, action, prev_status, new_status, reason FROM (
  SELECT * FROM payment_actions WHERE id < $1 ORDER BY id DESC LIMIT $6) s
WHERE ($2 = '' OR starts_with(actor, $2)) AND ($3 = '' OR action = $3) AND at >= $4
ORDER BY id DESC LIMIT $5`

// openSelectionSQL pins the payments among ids ($1, due at $3, between
// $5 and $6: their partitions only, under a generic plan too, as rowsSQL)
// that are in status $2 (PENDING or HELD), each with its currency and
// attempt: with the status, the attempt says it has not changed since (a
// claim changes it).
const openSelectionSQL = `
SELECT p.id, p.amount_minor, p.currency, p.attempt
FROM payments p
WHERE p.status = $2 AND p.id = ANY($1) AND p.due_time = ANY($3::timestamptz[])
  AND p.due_time BETWEEN $5 AND $6
ORDER BY p.due_time, p.id
LIMIT $4`

// deadSelectionSQL pins what an action will act on: the dead letters among
// ids (the selected ones, their due times $4 read first from
// payment_index so that only their partitions are read), or the first
// maxBulk matching a reason (all that match), through the dead-letter
// index; each with its currency and its attempt, which with the status
// says the payment has not changed since (only a claim changes the
// attempt, and a dead letter comes back only through one).
const deadSelectionSQL = `
SELECT p.id, p.amount_minor, p.currency, p.attempt
FROM payments p
WHERE p.status = ` + dead + ` AND p.due_time <= now()
  AND ($1::uuid[] IS NULL OR (p.id = ANY($1) AND p.due_time = ANY($4::timestamptz[])))
  AND ($2 = '' OR p.dead_letter_reason = $2)
ORDER BY p.due_time, p.id
LIMIT $3`

// cdcSlotsSQL is each logical slot, how far behind the server's WAL it is, and when cdc last confirmed it.
const cdcSlotsSQL = `
SELECT s.slot_name, s.active, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::float8 / 1048576,
       coalesce((SELECT to_char(st.confirmed_at, 'YYYY-MM-DD HH24:MI:SS') FROM cdc_state st WHERE st.slot = s.slot_name), '')
FROM pg_replication_slots s WHERE s.slot_type = 'logical' ORDER BY 1 LIMIT 20`

// auditHistorySQL is a payment's changes in the audit log, in commit order.
const auditHistorySQL = `SELECT committed_at, table_name, op, coalesce(status, ''), event FROM audit_events
WHERE payment_id = $1 ORDER BY lsn LIMIT 500`

// actionsLookedSQL is how far back a page of actions looked: the count and least id of the $2 before $1.
const actionsLookedSQL = `SELECT count(*), min(id) FROM (SELECT id FROM payment_actions WHERE id < $1 ORDER BY id DESC LIMIT $2) s`

// duesOfSQL is the due times of ids, from payment_index: the partitions a read of them needs.
const duesOfSQL = `SELECT coalesce(array_agg(DISTINCT due_time), '{}') FROM payment_index WHERE id = ANY($1)`
