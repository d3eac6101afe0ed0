package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store/movedb"
	"github.com/paysched/paysched/pkg/store/settledb"
)

// The reconciler's statements on payments (settledb/settle.sql, with why
// the repair is safe). They run inside a run's transaction, over the
// temporary table settle (the gateway's settlement report of the day)
// that pkg/reconcile loads, and leave their pairing in the temporary table
// matched for its mismatch queries.

// MatchSettled pairs each settled charge with its payment (due between lo
// and hi) into the temporary table matched, which the session must hold
// already (reconciledb.ReportTables makes it with settle).
func MatchSettled(ctx context.Context, db pgdb.DB, lo, hi time.Time) error {
	if err := settledb.New(db).MatchSettled(ctx, settledb.MatchSettledParams{Lo: lo, Hi: hi}); err != nil {
		return fmt.Errorf("match report: %w", err)
	}
	return nil
}

// RepairSettled moves to COMPLETED every matched payment the gateway
// settled that is not COMPLETED, recording the action and the run's item.
func RepairSettled(ctx context.Context, db pgdb.DB, runID int64, day string, lo, hi time.Time) error {
	// Why it is safe: settledb/settle.sql, RepairSettled.
	if err := settledb.New(db).RepairSettled(ctx, settledb.RepairSettledParams{Lo: lo, Hi: hi, Day: day, RunID: runID}); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	return nil
}

// CountCompleted counts payments due in [from, to) completed in [day, to).
func CountCompleted(ctx context.Context, db pgdb.DB, from, day, to time.Time) (int64, error) {
	n, err := settledb.New(db).CountCompleted(ctx, settledb.CountCompletedParams{DueFrom: from, Day: day, DueTo: to})
	if err != nil {
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
	rows, err := settledb.New(db).Unsettled(ctx, settledb.UnsettledParams{DueFrom: from, Day: day, DueTo: to})
	if err != nil {
		return nil, fmt.Errorf("unsettled payments: %w", err)
	}
	out := make([]Completed, len(rows))
	for i, r := range rows {
		out[i] = Completed{ID: r.ID, Amount: r.AmountMinor, Currency: r.Currency, Payer: r.Payer, DueTime: r.DueTime}
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
