package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/reconcile/reconciledb"
	"github.com/paysched/paysched/pkg/store"
)

// Item kinds a run records.
const (
	KindRepaired         = "REPAIRED"
	KindMissingAtGateway = "MISSING_AT_GATEWAY"
	KindAmountMismatch   = "AMOUNT_MISMATCH"
	KindDuplicateCharge  = "DUPLICATE_CHARGE"
	KindUnknownCharge    = "UNKNOWN_CHARGE"
)

// Run is one reconciliation of a UTC day.
type Run struct {
	ID          int64
	Day         time.Time
	TriggeredBy string
	State       store.RunState
	StartedAt   time.Time
	FinishedAt  time.Time
	// Charges: settled charges in the gateway's report for the day.
	Charges int64
	// Payments: COMPLETED payments the engine holds for the day.
	Payments int64
	// Repaired: payments moved to COMPLETED from gateway truth.
	Repaired int
	// Mismatches: items other than repairs (each needs a human).
	Mismatches int
	Error      string
	// Items: at most MaxItems, the most severe first.
	Items []Item

	byKind map[string]int
}

// Item is one finding of a run.
type Item struct {
	Kind      string
	Severity  string
	PaymentID string
	Reference string
	ChargeIDs []string
	Detail    string
}

// Runner reconciles days.
type Runner struct {
	DB      *pgxpool.Pool
	Gateway gateway.Gateway
	// PageSize of the settlement report (default 10,000, the gateway's max).
	PageSize int
	// Lookback: how many days before the reconciled one a payment may have
	// fallen due and still complete on it (retries, re-drives). Default 14.
	Lookback int
	Metrics  *Metrics
	Log      *slog.Logger
}

// Day truncates t to its UTC day.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// ErrRunInProgress means a run of the day is in flight (here or in another
// process); Start does not queue another behind it.
var ErrRunInProgress = errors.New("a reconciliation run of this day is already running")

// Run reconciles day: the gateway's settled charges against the payments,
// in both directions. Runs of one day are serialized (an advisory lock:
// Run waits for the one in flight), and a run is one transaction: its
// repairs and its items land together or not at all. Re-running a day
// repairs nothing more and finds the same mismatches.
func (r *Runner) Run(ctx context.Context, day time.Time, by string) (*Run, error) {
	conn, err := r.lock(ctx, Day(day), false)
	if err != nil {
		return nil, err
	}
	return r.runLocked(ctx, conn, Day(day), by)
}

// Start starts a run of day in the background, unless one is in flight
// (ErrRunInProgress, at once: an operator's second start is answered, not
// queued holding a connection). Its result arrives on the channel; the run
// goes on whatever ctx does (it is one transaction, and cutting it short
// would only waste it).
func (r *Runner) Start(ctx context.Context, day time.Time, by string) (<-chan Result, error) {
	day = Day(day)
	conn, err := r.lock(ctx, day, true)
	if err != nil {
		return nil, err
	}
	out := make(chan Result, 1)
	go func() {
		run, err := r.runLocked(context.WithoutCancel(ctx), conn, day, by)
		out <- Result{Run: run, Err: err}
	}()
	return out, nil
}

// Result is a started run's outcome.
type Result struct {
	Run *Run
	Err error
}

// lock takes a connection holding day's advisory lock, waiting for it or,
// with try, not (ErrRunInProgress).
func (r *Runner) lock(ctx context.Context, day time.Time, try bool) (*pgxpool.Conn, error) {
	conn, err := r.DB.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", day.Format(time.DateOnly), err)
	}
	lockKey := int32(day.Unix() / 86400)
	q := reconciledb.New(conn)
	if !try {
		if err := q.LockDay(ctx, lockKey); err != nil {
			conn.Release()
			return nil, fmt.Errorf("reconcile lock: %w", err)
		}
		return conn, nil
	}
	got, err := q.TryLockDay(ctx, lockKey)
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("reconcile lock: %w", err)
	}
	if !got {
		conn.Release()
		return nil, fmt.Errorf("reconcile %s: %w", day.Format(time.DateOnly), ErrRunInProgress)
	}
	return conn, nil
}

// runLocked runs day on conn, which holds its lock, and releases both.
func (r *Runner) runLocked(ctx context.Context, conn *pgxpool.Conn, day time.Time, by string) (*Run, error) {
	defer conn.Release()
	q := reconciledb.New(conn)
	defer func() {
		// Released with the session anyway, if this fails.
		_ = q.UnlockDay(context.Background(), int32(day.Unix()/86400))
	}()

	run := &Run{Day: day, TriggeredBy: by, State: store.RunRunning}
	started, err := q.StartRun(ctx, reconciledb.StartRunParams{Day: day, TriggeredBy: by})
	if err != nil {
		return nil, fmt.Errorf("record run: %w", err)
	}
	run.ID, run.StartedAt = started.ID, started.StartedAt
	runErr := r.run(ctx, conn.Conn(), run)
	run.State = store.RunSucceeded
	if runErr != nil {
		run.State, run.Error = store.RunFailed, runErr.Error()
		run.Items, run.Repaired, run.Mismatches, run.byKind = nil, 0, 0, nil
	}
	// The outcome is recorded even when ctx ended: a run never stays RUNNING.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	fin, err := q.FinishRun(fctx, reconciledb.FinishRunParams{ID: run.ID, State: string(run.State), Charges: run.Charges,
		Payments: run.Payments, Repaired: int32(run.Repaired), Mismatches: int32(run.Mismatches), Error: run.Error})
	if err != nil {
		return nil, fmt.Errorf("finish run %d: %w", run.ID, err)
	}
	if fin != nil {
		run.FinishedAt = *fin
	}
	r.Metrics.observe(run)
	if runErr != nil {
		return run, fmt.Errorf("reconcile %s: %w", day.Format(time.DateOnly), runErr)
	}
	r.log().Info("reconciled", "day", day.Format(time.DateOnly), "run", run.ID, "charges", run.Charges,
		"payments", run.Payments, "repaired", run.Repaired, "mismatches", run.Mismatches,
		"seconds", run.FinishedAt.Sub(run.StartedAt).Seconds())
	return run, nil
}

func (r *Runner) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

func (r *Runner) run(ctx context.Context, conn *pgx.Conn, run *Run) error {
	dayStr := run.Day.Format(time.DateOnly)
	// The diff works on the whole day at once, over the run's temporary
	// tables (reconciledb/report.sql, diff.sql): a million charges is a
	// few hash joins, not a million round trips.
	q := reconciledb.New(conn)
	if _, err := conn.Exec(ctx, reconciledb.ReportTables); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	if err := q.ClearReport(ctx); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer func() {
		// Temporary tables: they go with the session anyway, if this fails.
		_ = q.DropReport(context.WithoutCancel(ctx))
	}()
	n, err := r.loadReport(ctx, conn, dayStr)
	if err != nil {
		return err
	}
	run.Charges = n
	if err := q.IndexReport(ctx); err != nil {
		return fmt.Errorf("index report: %w", err)
	}
	if err := q.AnalyzeReport(ctx); err != nil {
		return fmt.Errorf("index report: %w", err)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) (err error) {
		txq := reconciledb.New(tx)
		rng, err := txq.ReportRange(ctx)
		if err != nil {
			return fmt.Errorf("report range: %w", err)
		}
		lo, hi := &rng.Lo, &rng.Hi
		if rng.Named == 0 {
			// No charge names a known payment: an empty range.
			t := run.Day
			lo, hi = &t, &t
		}
		if err := store.MatchSettled(ctx, tx, *lo, *hi); err != nil {
			return err
		}
		for _, record := range []func(context.Context, int64) error{txq.RecordDuplicates, txq.RecordUnknown, txq.RecordAmountMismatches} {
			if err := record(ctx, run.ID); err != nil {
				return fmt.Errorf("record mismatches: %w", err)
			}
		}
		if err := store.RepairSettled(ctx, tx, run.ID, dayStr, *lo, *hi); err != nil {
			return err
		}
		from, to := run.Day.AddDate(0, 0, -r.lookback()), run.Day.AddDate(0, 0, 1)
		if run.Payments, err = store.CountCompleted(ctx, tx, from, run.Day, to); err != nil {
			return err
		}
		if err := r.checkUnsettled(ctx, tx, run, from, to); err != nil {
			return err
		}
		kinds, err := txq.CountItems(ctx, run.ID)
		if err != nil {
			return fmt.Errorf("count items: %w", err)
		}
		run.byKind = map[string]int{}
		for _, k := range kinds {
			n := int(k.N)
			run.byKind[k.Kind] = n
			if k.Kind == KindRepaired {
				run.Repaired += n
			} else {
				run.Mismatches += n
			}
		}
		run.Items, err = loadItems(ctx, tx, run.ID)
		return err
	})
}

func (r *Runner) lookback() int {
	if r.Lookback <= 0 {
		return 14
	}
	return r.Lookback
}

// loadReport copies the day's settlement report into settle, fetching the
// next page while the current one is copied.
func (r *Runner) loadReport(ctx context.Context, conn *pgx.Conn, day string) (int64, error) {
	size := r.PageSize
	if size <= 0 {
		size = 10000
	}
	type page struct {
		resp *gatewayv1.ListSettlementsResponse
		err  error
	}
	fetch := func(token string) chan page {
		ch := make(chan page, 1)
		go func() {
			resp, err := r.Gateway.ListSettlements(ctx, &gatewayv1.ListSettlementsRequest{Day: day, PageToken: token, PageSize: int32(size)})
			ch <- page{resp, err}
		}()
		return ch
	}
	var total int64
	next := fetch("")
	for {
		p := <-next
		if p.err != nil {
			return 0, fmt.Errorf("settlement report: %w", p.err)
		}
		if tok := p.resp.GetNextPageToken(); tok != "" {
			next = fetch(tok)
		} else {
			next = nil
		}
		charges := p.resp.GetCharges()
		n, err := conn.CopyFrom(ctx, pgx.Identifier{"settle"},
			[]string{"charge_id", "reference", "ref_id", "amount", "currency", "created_at"},
			pgx.CopyFromSlice(len(charges), func(i int) ([]any, error) {
				c := charges[i]
				var ref any
				if id, err := uuid.Parse(c.GetReference()); err == nil {
					ref = id
				}
				// The gateway's strings are cleaned as every answer is: one
				// bad byte must not fail the day's run.
				return []any{gateway.Clean(c.GetChargeId(), 255), gateway.Clean(c.GetReference(), 255), ref, c.GetAmount(),
					gateway.Clean(c.GetCurrency(), 8), c.GetCreatedAt().AsTime()}, nil
			}))
		if err != nil {
			return 0, fmt.Errorf("copy report: %w", err)
		}
		total += n
		if next == nil {
			return total, nil
		}
	}
}

// checkUnsettled asks the gateway about each COMPLETED payment of the day
// that the report does not name: it may have been charged on another day
// (a charge just before midnight, recorded just after); otherwise it is
// MISSING_AT_GATEWAY. An unanswered probe fails the run rather than report
// a mismatch that may not exist.
func (r *Runner) checkUnsettled(ctx context.Context, tx pgx.Tx, run *Run, from, to time.Time) error {
	cands, err := store.Unsettled(ctx, tx, from, run.Day, to)
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		items []Item
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 16)
	)
	for _, c := range cands {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			it, err := r.probeCompleted(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if it != nil {
				items = append(items, *it)
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	for _, it := range items {
		if err := reconciledb.New(tx).RecordItem(ctx, reconciledb.RecordItemParams{RunID: run.ID, Kind: it.Kind, Severity: it.Severity,
			PaymentID: it.PaymentID, Reference: it.Reference, ChargeIds: it.ChargeIDs, Detail: it.Detail}); err != nil {
			return fmt.Errorf("record item: %w", err)
		}
	}
	return nil
}

func (r *Runner) probeCompleted(ctx context.Context, p store.Completed) (*Item, error) {
	id, amount, currency := p.ID, p.Amount, p.Currency
	var c *gatewayv1.Charge
	var err error
	for try := 0; try < 3; try++ {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err = r.Gateway.GetCharge(pctx, gateway.ProbeRequest(gateway.ChargeInput{ID: id.String(), Payer: p.Payer, DueAt: p.DueTime}))
		cancel()
		if err == nil || gateway.ProvenAbsent(err) {
			break
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
	missing := &Item{Kind: KindMissingAtGateway, Severity: "CRITICAL", PaymentID: id.String(), Reference: id.String(), ChargeIDs: []string{}}
	switch {
	case gateway.ProvenAbsent(err):
		missing.Detail = "COMPLETED, but the gateway proved it holds no charge under its key"
		return missing, nil
	case err != nil:
		return nil, fmt.Errorf("probe %s: %w", id, err)
	}
	switch {
	case c.GetStatus() == gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED:
		missing.ChargeIDs = []string{c.GetChargeId()}
		missing.Detail = "COMPLETED, but the gateway declined its charge"
		return missing, nil
	case c.GetStatus() != gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED:
		missing.ChargeIDs = []string{c.GetChargeId()}
		missing.Detail = "COMPLETED, but the gateway's charge is " + c.GetStatus().String()
		return missing, nil
	case c.GetAmount() != amount || c.GetCurrency() != currency:
		return &Item{Kind: KindAmountMismatch, Severity: "CRITICAL", PaymentID: id.String(), Reference: id.String(),
			ChargeIDs: []string{c.GetChargeId()},
			Detail:    fmt.Sprintf("gateway %d %s, payment %d %s", c.GetAmount(), c.GetCurrency(), amount, currency)}, nil
	}
	return nil, nil // settled on another day: consistent
}

// MaxItems bounds the items a Run carries (the most severe first); the
// counts are always complete and reconciliation_items holds every item.
const MaxItems = 1000

func loadItems(ctx context.Context, db pgdb.DB, runID int64) ([]Item, error) {
	rows, err := reconciledb.New(db).LoadItems(ctx, reconciledb.LoadItemsParams{RunID: runID, Max: MaxItems})
	if err != nil {
		return nil, fmt.Errorf("load items: %w", err)
	}
	items := make([]Item, len(rows))
	for i, r := range rows {
		items[i] = Item{Kind: r.Kind, Severity: r.Severity, PaymentID: r.PaymentID, Reference: r.Reference, ChargeIDs: r.ChargeIds, Detail: r.Detail}
	}
	return items, nil
}

// ErrNoRun means no run has that id.
var ErrNoRun = errors.New("no such reconciliation run")

// Runs lists runs, newest first, optionally of one day (zero: all), with
// their items; before (0: from the newest) pages by run id.
func Runs(ctx context.Context, db pgdb.DB, day time.Time, before int64, limit int) ([]*Run, error) {
	var dayArg *time.Time
	if !day.IsZero() {
		d := Day(day)
		dayArg = &d
	}
	got, err := reconciledb.New(db).ListRuns(ctx, reconciledb.ListRunsParams{Day: dayArg, Before: before, Max: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	runs := make([]*Run, len(got))
	for i, x := range got {
		runs[i] = &Run{ID: x.ID, Day: x.Day, TriggeredBy: x.TriggeredBy, State: store.RunState(x.State), StartedAt: x.StartedAt,
			Charges: x.Charges, Payments: x.Payments, Repaired: int(x.Repaired), Mismatches: int(x.Mismatches), Error: x.Error}
		if x.FinishedAt != nil {
			runs[i].FinishedAt = *x.FinishedAt
		}
	}
	for _, r := range runs {
		if r.Items, err = loadItems(ctx, db, r.ID); err != nil {
			return nil, err
		}
	}
	return runs, nil
}
