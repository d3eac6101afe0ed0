package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store/movedb"
)

// The reconciler's statements on payments. They run inside a run's
// transaction, over the temporary table settle (the gateway's settlement
// report of the day: charge_id, reference, ref_id, amount, currency) that
// pkg/reconcile loads, and leave their pairing in the temporary table
// matched for its mismatch queries.

// matched pairs each charged reference (its lowest charge id) with its
// payment, if any.
const matchedSQL = `CREATE TEMP TABLE matched AS
SELECT s.charge_id, s.reference, s.amount, s.currency, p.id AS pid, p.due_time, p.status, p.attempt,
       p.amount_minor, p.currency AS pcurrency
FROM (SELECT DISTINCT ON (reference) * FROM settle ORDER BY reference, charge_id) s
LEFT JOIN payment_index i ON i.id = s.ref_id
LEFT JOIN payments p ON p.id = i.id AND p.due_time = i.due_time AND p.due_time BETWEEN $1 AND $2`

// repairSQL moves to COMPLETED every payment the gateway settled that
// the engine does not hold as COMPLETED.
//
// Why it is safe: each UPDATE is fenced on the (status, attempt) read in
// matched, inside this run's transaction; a payment that moved since
// (an executor recording its outcome, a claim) is left alone and found
// again by the next run. An executor's late write is fenced out by
// status = 'PROCESSING'. The action and the item are written by the
// same statement.
const repairSQL = `
WITH upd AS (
    UPDATE payments p
    SET status = 'COMPLETED', gateway_ref = m.charge_id, dead_letter_reason = NULL, failure_reason = NULL,
        lease_until = NULL, lease_owner = NULL, updated_at = now()
    FROM matched m
    WHERE m.pid IS NOT NULL AND m.status <> 'COMPLETED' AND m.amount = m.amount_minor AND m.currency = m.pcurrency
      AND p.id = m.pid AND p.due_time = m.due_time AND p.status = m.status AND p.attempt = m.attempt
      AND p.due_time BETWEEN $3 AND $4
    RETURNING p.id, m.status AS prev, m.charge_id, m.reference
), act AS (
    INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason, run_id)
    SELECT id, 'reconciler', 'REPAIR', prev, 'COMPLETED', 'gateway settled charge ' || charge_id || ' on ' || $2, $1 FROM upd
)
INSERT INTO reconciliation_items (run_id, kind, severity, payment_id, reference, charge_ids, detail)
SELECT $1, 'REPAIRED', CASE WHEN prev IN ('FAILED', 'CANCELLED') THEN 'CRITICAL' ELSE 'WARNING' END,
       id, reference, ARRAY[charge_id], 'was ' || prev || ', gateway settled it: now COMPLETED'
FROM upd`

// completedSQL is the engine's side: payments completed on the day,
// due within the lookback, that the day's report does not name.
const completedSQL = `
SELECT count(*) FROM payments p
WHERE p.status = 'COMPLETED' AND p.due_time >= $1 AND p.due_time < $3
  AND p.updated_at >= $2 AND p.updated_at < $3`

const unsettledSQL = `
SELECT p.id, p.amount_minor, p.currency, p.payer, p.due_time FROM payments p
WHERE p.status = 'COMPLETED' AND p.due_time >= $1 AND p.due_time < $3
  AND p.updated_at >= $2 AND p.updated_at < $3
  AND NOT EXISTS (SELECT 1 FROM settle s WHERE s.ref_id = p.id)`

// MatchSettled pairs each settled charge with its payment (due between lo
// and hi) into the temporary table matched.
func MatchSettled(ctx context.Context, db pgdb.DB, lo, hi time.Time) error {
	if _, err := db.Exec(ctx, matchedSQL, lo, hi); err != nil {
		return fmt.Errorf("match report: %w", err)
	}
	return nil
}

// RepairSettled moves to COMPLETED every matched payment the gateway
// settled that is not COMPLETED, recording the action and the run's item.
func RepairSettled(ctx context.Context, db pgdb.DB, runID int64, day string, lo, hi time.Time) error {
	if _, err := db.Exec(ctx, repairSQL, runID, day, lo, hi); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	return nil
}

// CountCompleted counts payments due in [from, to) completed in [day, to).
func CountCompleted(ctx context.Context, db pgdb.DB, from, day, to time.Time) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, completedSQL, from, day, to).Scan(&n); err != nil {
		return 0, fmt.Errorf("count completed: %w", err)
	}
	return n, nil
}

// Completed is a COMPLETED payment the day's report does not name.
type Completed struct {
	ID       uuid.UUID
	Amount   int64
	Currency string
	Payer    string
	DueTime  time.Time
}

// Unsettled lists the payments CountCompleted counts that settle does not name.
func Unsettled(ctx context.Context, db pgdb.DB, from, day, to time.Time) ([]Completed, error) {
	rows, err := db.Query(ctx, unsettledSQL, from, day, to)
	if err != nil {
		return nil, fmt.Errorf("unsettled payments: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Completed, error) {
		var c Completed
		err := row.Scan(&c.ID, &c.Amount, &c.Currency, &c.Payer, &c.DueTime)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("unsettled payments: %w", err)
	}
	return out, nil
}

// Probe is an ambiguous dead letter whose next probe is due.
type Probe struct {
	ID       uuid.UUID
	DueTime  time.Time
	Payer    string
	Amount   int64
	Currency string
	// Probes already made.
	Probes int32
	// SentBy is when its requests had all been sent (ClaimedPayment.SentBy).
	SentBy time.Time
}

// DueProbes lists up to limit ambiguous dead letters to ask the gateway about.
func DueProbes(ctx context.Context, db pgdb.DB, limit int) ([]Probe, error) {
	rows, err := movedb.New(db).DueProbes(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("due probes: %w", err)
	}
	out := make([]Probe, len(rows))
	for i, r := range rows {
		out[i] = Probe{ID: r.ID, DueTime: r.DueTime, Payer: r.Payer, Amount: r.AmountMinor, Currency: r.Currency, Probes: r.Probes}
		if r.SentAgoS >= 0 {
			out[i].SentBy = sentBy(&r.SentAgoS)
		}
	}
	return out, nil
}

// PostponeProbe records an unanswered probe and schedules the next one
// after wait.
func PostponeProbe(ctx context.Context, db pgdb.DB, id uuid.UUID, due time.Time, probes int32, wait time.Duration, why string) error {
	// Why it is safe: movedb/moves.sql, PostponeProbe.
	if err := movedb.New(db).PostponeProbe(ctx, movedb.PostponeProbeParams{ID: id, DueTime: due, Probes: probes,
		WaitS: wait.Seconds(), Why: why}); err != nil {
		return fmt.Errorf("postpone probe of %s: %w", id, err)
	}
	return nil
}

// RunState is a reconciliation run's state, as reconciliation_runs stores it.
type RunState string

// The run states.
const (
	RunRunning   RunState = "RUNNING"
	RunSucceeded RunState = "SUCCEEDED"
	RunFailed    RunState = "FAILED"
)
