// Package gatewaysim is the payment gateway's stand-in: an exact
// idempotent ledger (in Postgres, or in memory for benchmarks) behind
// gateway.v1, with fault injection and a double-charge report.
package gatewaysim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Charge is one ledger entry.
type Charge struct {
	ID, Key, Reference     string
	Amount                 int64
	Currency, Payer, Payee string
	Declined               bool
	DeclineReason          string
	CreatedAt              time.Time
	// Pending, when set, holds the charge undecided: PendingAction (the
	// customer must authenticate: until cancelled) or PendingProcessing
	// (until DecideAt, then it succeeded).
	Pending  string
	DecideAt time.Time
}

// The undecided states of a charge.
const (
	PendingAction     = "action_required"
	PendingProcessing = "processing"
)

// Succeeded says whether c had succeeded at now.
func (c *Charge) Succeeded(now time.Time) bool {
	return !c.Declined && (c.Pending == "" || c.Pending == PendingProcessing && !now.Before(c.DecideAt))
}

// Undecided says whether c was still undecided at now.
func (c *Charge) Undecided(now time.Time) bool {
	return !c.Declined && !c.Succeeded(now)
}

// sameParams says whether a repeat of key asks for the same charge.
func (c *Charge) sameParams(o *Charge) bool {
	return c.Amount == o.Amount && c.Currency == o.Currency && c.Payer == o.Payer &&
		c.Payee == o.Payee && c.Reference == o.Reference
}

// ErrMismatch means the key was used with other parameters.
var ErrMismatch = errors.New("idempotency key reused with different parameters")

// ErrBadPage means the page token was not issued by this ledger.
var ErrBadPage = errors.New("invalid page token")

// ErrNotFound means no charge under that key.
var ErrNotFound = errors.New("no charge under this key")

// ErrDecided means the charge to cancel is decided (or is not the key's).
var ErrDecided = errors.New("the charge is decided: it cannot be cancelled")

// Ledger records charges exactly once per key.
type Ledger interface {
	// Record stores c unless its key exists; it returns the stored charge
	// and whether it was new. Calls with one key are serialized.
	Record(ctx context.Context, c *Charge) (*Charge, bool, error)
	Get(ctx context.Context, key string) (*Charge, error)
	// Cancel declines the undecided charge id under key (reason as its
	// decline reason) and returns it; a charge already declined is
	// returned as it is; ErrDecided if it succeeded meanwhile or is not the
	// key's, ErrNotFound if the key holds none.
	Cancel(ctx context.Context, key, id, reason string) (*Charge, error)
	// Settled lists up to limit succeeded charges of a UTC day from page
	// (empty: the first), and the token of the next page (empty: no more).
	// Charges whose answer was lost are included: they were recorded.
	Settled(ctx context.Context, day time.Time, page string, limit int) ([]*Charge, string, error)
	// Counts returns charges, succeeded, and references with >1 success.
	Counts(ctx context.Context) (int64, int64, []string, error)
}

// MemLedger keeps charges in memory, sharded by key, plus each day's
// succeeded charges in arrival order so that settlement pages are cheap.
type MemLedger struct {
	shards [64]struct {
		sync.Mutex
		m map[string]*Charge
	}
	dayMu sync.Mutex
	days  map[string][]*Charge
}

// NewMemLedger returns an empty in-memory ledger.
func NewMemLedger() *MemLedger {
	l := &MemLedger{days: map[string][]*Charge{}}
	for i := range l.shards {
		l.shards[i].m = map[string]*Charge{}
	}
	return l
}

func (l *MemLedger) shard(key string) int {
	h := uint32(2166136261) // FNV-1a, without a hasher per call
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return int(h % uint32(len(l.shards)))
}

// Record implements Ledger.
func (l *MemLedger) Record(_ context.Context, c *Charge) (*Charge, bool, error) {
	s := &l.shards[l.shard(c.Key)]
	s.Lock()
	defer s.Unlock()
	if old, ok := s.m[c.Key]; ok {
		if !old.sameParams(c) {
			return nil, false, ErrMismatch
		}
		return old, false, nil
	}
	s.m[c.Key] = c
	if !c.Declined {
		// Appended under the shard lock: a key is listed at most once.
		day := c.CreatedAt.UTC().Format(time.DateOnly)
		l.dayMu.Lock()
		l.days[day] = append(l.days[day], c)
		l.dayMu.Unlock()
	}
	return c, true, nil
}

// Get implements Ledger.
func (l *MemLedger) Get(_ context.Context, key string) (*Charge, error) {
	s := &l.shards[l.shard(key)]
	s.Lock()
	defer s.Unlock()
	if c, ok := s.m[key]; ok {
		return c, nil
	}
	return nil, ErrNotFound
}

// Cancel implements Ledger. The cancelled charge replaces the undecided
// one (entries are never changed in place: readers hold them unlocked).
func (l *MemLedger) Cancel(_ context.Context, key, id, reason string) (*Charge, error) {
	s := &l.shards[l.shard(key)]
	s.Lock()
	defer s.Unlock()
	c, ok := s.m[key]
	switch {
	case !ok:
		return nil, ErrNotFound
	case c.ID != id:
		return nil, ErrDecided
	case c.Declined:
		return c, nil
	case !c.Undecided(time.Now()):
		return nil, ErrDecided
	}
	d := *c
	d.Declined, d.DeclineReason, d.Pending = true, reason, ""
	s.m[key] = &d
	return &d, nil
}

// current is the entry now held for c's key (a cancel replaces one).
func (l *MemLedger) current(c *Charge) *Charge {
	if c.Pending == "" {
		return c
	}
	s := &l.shards[l.shard(c.Key)]
	s.Lock()
	defer s.Unlock()
	if now, ok := s.m[c.Key]; ok && now.ID == c.ID {
		return now
	}
	return c
}

// Settled implements Ledger. The page token is an offset into the day's
// append-only list, so pages stay stable while charges keep arriving; a
// charge undecided when listed is left out.
func (l *MemLedger) Settled(_ context.Context, day time.Time, page string, limit int) ([]*Charge, string, error) {
	from := 0
	if page != "" {
		n, err := strconv.Atoi(page)
		if err != nil || n < 0 {
			return nil, "", ErrBadPage
		}
		from = n
	}
	l.dayMu.Lock()
	list := l.days[day.UTC().Format(time.DateOnly)]
	l.dayMu.Unlock()
	if from >= len(list) {
		return nil, "", nil
	}
	to := min(len(list), from+limit)
	out := make([]*Charge, 0, to-from)
	now := time.Now()
	for _, c := range list[from:to] {
		if c = l.current(c); c.Succeeded(now) {
			out = append(out, c)
		}
	}
	next := ""
	if to < len(list) {
		next = strconv.Itoa(to)
	}
	return out, next, nil
}

// Counts implements Ledger.
func (l *MemLedger) Counts(context.Context) (int64, int64, []string, error) {
	var total, ok int64
	perRef := map[string]int{}
	now := time.Now()
	for i := range l.shards {
		s := &l.shards[i]
		s.Lock()
		for _, c := range s.m {
			total++
			if c.Succeeded(now) {
				ok++
				perRef[c.Reference]++
			}
		}
		s.Unlock()
	}
	return total, ok, doubles(perRef), nil
}

func doubles(perRef map[string]int) []string {
	out := []string{}
	for r, n := range perRef {
		if n > 1 {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

// PGLedger keeps charges in gateway-sim's own Postgres database.
type PGLedger struct{ db *pgxpool.Pool }

// ledgerSchema is gateway-sim's whole schema: the key is the primary key,
// which is what makes a charge happen once per key.
const ledgerSchema = `
CREATE TABLE IF NOT EXISTS gateway_charges (
    idempotency_key text PRIMARY KEY,
    charge_id       text NOT NULL UNIQUE,
    reference       text NOT NULL,
    amount          bigint NOT NULL,
    currency        text NOT NULL,
    payer           text NOT NULL,
    payee           text NOT NULL,
    declined        boolean NOT NULL,
    decline_reason  text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE gateway_charges ADD COLUMN IF NOT EXISTS pending text NOT NULL DEFAULT '';
ALTER TABLE gateway_charges ADD COLUMN IF NOT EXISTS decide_at timestamptz;
CREATE INDEX IF NOT EXISTS gateway_charges_day ON gateway_charges (created_at, charge_id) WHERE NOT declined;
CREATE INDEX IF NOT EXISTS gateway_charges_ref ON gateway_charges (reference);`

// NewPGLedger creates the schema if needed.
func NewPGLedger(ctx context.Context, db *pgxpool.Pool) (*PGLedger, error) {
	if _, err := db.Exec(ctx, ledgerSchema); err != nil {
		return nil, fmt.Errorf("gateway ledger schema: %w", err)
	}
	return &PGLedger{db: db}, nil
}

const chargeCols = `charge_id, idempotency_key, reference, amount, currency, payer, payee, declined, decline_reason, created_at, pending, decide_at`

func scanCharge(r pgx.Row) (*Charge, error) {
	c := &Charge{}
	var decide *time.Time
	err := r.Scan(&c.ID, &c.Key, &c.Reference, &c.Amount, &c.Currency, &c.Payer, &c.Payee, &c.Declined, &c.DeclineReason, &c.CreatedAt,
		&c.Pending, &decide)
	if decide != nil {
		c.DecideAt = *decide
	}
	return c, err
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// succeededSQL is Charge.Succeeded in SQL.
const succeededSQL = `NOT declined AND (pending = '' OR (pending = 'processing' AND decide_at <= now()))`

// Record implements Ledger. The insert waits on a concurrent insert of the
// same key (unique index), so one key is serialized by Postgres.
func (l *PGLedger) Record(ctx context.Context, c *Charge) (*Charge, bool, error) {
	_, err := l.db.Exec(ctx, `INSERT INTO gateway_charges (`+chargeCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)
		ON CONFLICT (idempotency_key) DO NOTHING`,
		c.ID, c.Key, c.Reference, c.Amount, c.Currency, c.Payer, c.Payee, c.Declined, c.DeclineReason, c.CreatedAt,
		c.Pending, nullTime(c.DecideAt))
	if err != nil {
		return nil, false, fmt.Errorf("record charge: %w", err)
	}
	stored, err := l.Get(ctx, c.Key)
	if err != nil {
		return nil, false, err
	}
	if stored.ID == c.ID {
		return stored, true, nil
	}
	if !stored.sameParams(c) {
		return nil, false, ErrMismatch
	}
	return stored, false, nil
}

// Get implements Ledger.
func (l *PGLedger) Get(ctx context.Context, key string) (*Charge, error) {
	c, err := scanCharge(l.db.QueryRow(ctx, `SELECT `+chargeCols+` FROM gateway_charges WHERE idempotency_key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get charge: %w", err)
	}
	return c, nil
}

// Cancel implements Ledger.
func (l *PGLedger) Cancel(ctx context.Context, key, id, reason string) (*Charge, error) {
	c, err := scanCharge(l.db.QueryRow(ctx, `UPDATE gateway_charges SET declined = true, decline_reason = $3, pending = ''
		WHERE idempotency_key = $1 AND charge_id = $2 AND NOT declined AND pending <> ''
		  AND NOT (pending = 'processing' AND decide_at <= now())
		RETURNING `+chargeCols, key, id, reason))
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("cancel charge: %w", err)
	}
	c, err = l.Get(ctx, key)
	switch {
	case err != nil:
		return nil, err
	case c.ID == id && c.Declined:
		return c, nil
	}
	return nil, ErrDecided
}

// Settled implements Ledger. The page token is the last charge id listed.
func (l *PGLedger) Settled(ctx context.Context, day time.Time, page string, limit int) ([]*Charge, string, error) {
	start := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	rows, err := l.db.Query(ctx, `SELECT `+chargeCols+` FROM gateway_charges
		WHERE `+succeededSQL+` AND created_at >= $1 AND created_at < $2 AND charge_id > $3
		ORDER BY charge_id LIMIT $4`, start, start.AddDate(0, 0, 1), page, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list settlements: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Charge, error) { return scanCharge(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list settlements: %w", err)
	}
	if len(cs) > limit {
		cs = cs[:limit]
		return cs, cs[limit-1].ID, nil
	}
	return cs, "", nil
}

// Counts implements Ledger.
func (l *PGLedger) Counts(ctx context.Context) (int64, int64, []string, error) {
	var total, ok int64
	if err := l.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE `+succeededSQL+`) FROM gateway_charges`).Scan(&total, &ok); err != nil {
		return 0, 0, nil, fmt.Errorf("count charges: %w", err)
	}
	rows, err := l.db.Query(ctx, `SELECT reference FROM gateway_charges WHERE `+succeededSQL+` GROUP BY reference HAVING count(*) > 1 ORDER BY 1`)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("double charges: %w", err)
	}
	refs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, 0, nil, err
	}
	if refs == nil {
		refs = []string{}
	}
	return total, ok, refs, nil
}
