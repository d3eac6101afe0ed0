package store

// Fair claims: the statements behind the sweepers' deficit round-robin over
// tenants (pkg/engine/fair decides the shares; docs/DESIGN.md, "Fair
// claims"). Each is O(what it returns): the walk of the due tenants reads
// tenant_queue's due entries (migration 18), a claim touches only the rows
// it takes, and a settle one index probe per partition per tenant.

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// walkSQL walks the distinct tenants of one partition's PENDING rows in
// tenant order (%[1]s the partition), from $1 (%[2]s: ">=" at the start of
// a cycle, ">" after a cursor), visiting at most $2 tenants, and says of
// each whether it has a due row. It is a loose index scan over
// payments_tenant_sweep_idx: one probe per tenant finds the next tenant
// and its oldest PENDING row, which is due or not. It never reads a
// tenant's rows beyond the first, however many it has.
const walkSQL = `
WITH RECURSIVE walk(tenant, run_at, n) AS (
    (SELECT tenant, run_at, 1 FROM %[1]s WHERE status = 'PENDING' AND tenant %[2]s $1 ORDER BY tenant, run_at LIMIT 1)
    UNION ALL
    SELECT nx.tenant, nx.run_at, w.n + 1
    FROM walk w CROSS JOIN LATERAL (
        SELECT p.tenant, p.run_at FROM %[1]s p WHERE p.status = 'PENDING' AND p.tenant > w.tenant
        ORDER BY p.tenant, p.run_at LIMIT 1) nx
    WHERE w.n < $2
)
SELECT tenant, n, run_at <= now(), run_at FROM walk`

// fairClaimSQL claims, in one partition (%[1]s), up to quota $4[i] due
// rows of tenant $3[i], each tenant's oldest run_at first, for owner $1
// with lease $2, and peeks past each share (docs/DESIGN.md, "The peek"):
// beside the claimed rows (peek 0) it returns a row (id NULL) of peek 1
// for a tenant that filled its share and has another due row after it,
// and of peek 2 for a tenant short of its share whose due rows are held
// by another transaction (another sweeper's claim in flight): neither is
// drained, so neither needs a settle. The first is the quota+1st row
// locked beside the share and left PENDING; the second a plain read of
// the statement's snapshot, past the rows it claims.
//
// Why it is safe: it is claimSQL with the due rows chosen per tenant; each
// tenant's rows are locked FOR UPDATE SKIP LOCKED, so each row goes to one
// claimer, a row another transaction holds is passed by, and the UPDATE
// repeats the status test and increments the fencing token exactly as
// claimSQL does. The row peeked past a share is locked and not updated:
// it stays PENDING, and its lock ends with the statement. The peeks only
// spare a settle; they never move tenant_queue.
const fairClaimSQL = `
WITH share AS (
    SELECT * FROM unnest($3::text[], $4::int[]) AS s(tenant, quota)
), took AS (
    SELECT s.tenant, s.quota, d.ctid, row_number() OVER (PARTITION BY s.tenant ORDER BY d.run_at, d.ctid) AS k
    FROM share s CROSS JOIN LATERAL (
        SELECT ctid, run_at FROM %[1]s
        WHERE status = 'PENDING' AND tenant = s.tenant AND run_at <= now()
        ORDER BY run_at
        LIMIT s.quota + 1
        FOR UPDATE SKIP LOCKED) d
), due AS (
    SELECT ctid FROM took WHERE k <= quota
), got AS (
    SELECT tenant, count(*) AS n, array_agg(ctid) AS taken FROM took GROUP BY tenant
), claimed AS (` + claimDueSQL + `
)
SELECT id, due_time, run_at, attempt, tenant, 0 FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, tenant, 1 FROM took WHERE k = quota + 1
UNION ALL
SELECT NULL, NULL, NULL, NULL, s.tenant, 2 FROM share s LEFT JOIN got g ON g.tenant = s.tenant
WHERE coalesce(g.n, 0) < s.quota AND EXISTS (
    SELECT 1 FROM %[1]s p WHERE p.status = 'PENDING' AND p.tenant = s.tenant AND p.run_at <= now()
    AND p.ctid <> ALL (coalesce(g.taken, '{}')))`

// TenantListing is what one walk of the tenants found (the operators' listing by name).
type TenantListing struct {
	// Due lists the tenants with a due PENDING row, each once, in walk
	// order; DueIn says in which partitions (by day) each has one.
	Due   []string
	DueIn map[string][]time.Time
	// Next is where the next walk starts ("": a new cycle), and Complete
	// says this walk saw every tenant with a PENDING row.
	Next     string
	Complete bool
	// NextDue is the earliest oldest run_at of a walked tenant with
	// nothing due yet (zero: none): when a new tenant falls due.
	NextDue time.Time
}

// WalkTenants visits, in every partition that may hold a due row, at most
// max tenants with PENDING rows from cursor on ("": from the first), in
// one round trip: the operators' listing of tenants by name (ListTenants).
// The sweepers walk tenant_queue instead (DueTenants).
func (c *Claimer) WalkTenants(ctx context.Context, cursor string, max int) (TenantListing, error) {
	days, err := c.days(ctx)
	if err != nil {
		return TenantListing{}, fmt.Errorf("walk tenants: %w", err)
	}
	op := ">"
	if cursor == "" {
		op = ">="
	}
	b := &pgx.Batch{}
	for _, d := range days {
		b.Queue(fmt.Sprintf(walkSQL, pgx.Identifier{Partition(d)}.Sanitize(), op), cursor, max)
	}
	res := c.DB.SendBatch(ctx, b)
	defer res.Close()
	w := TenantListing{DueIn: map[string][]time.Time{}, Complete: true}
	for _, d := range days {
		rows, err := res.Query()
		if err != nil {
			if missingPartition(err) {
				continue
			}
			return TenantListing{}, fmt.Errorf("walk tenants of %s: %w", Partition(d), err)
		}
		var tenant, last string
		var n, walked int
		var due bool
		var runAt time.Time
		_, err = pgx.ForEachRow(rows, []any{&tenant, &n, &due, &runAt}, func() error {
			last, walked = tenant, n
			if !due && (w.NextDue.IsZero() || runAt.Before(w.NextDue)) {
				w.NextDue = runAt
			}
			if due {
				if _, seen := w.DueIn[tenant]; !seen {
					w.Due = append(w.Due, tenant)
				}
				w.DueIn[tenant] = append(w.DueIn[tenant], d)
			}
			return nil
		})
		if err != nil && !missingPartition(err) {
			return TenantListing{}, fmt.Errorf("walk tenants of %s: %w", Partition(d), err)
		}
		if walked >= max {
			// Stopped by the bound: go on from the earliest such stop.
			if w.Complete || last < w.Next {
				w.Next = last
			}
			w.Complete = false
		}
	}
	return w, nil
}

// TenantCursor is where a walk of the due tenants stands: after the tenant
// Tenant whose next due time was At. The zero TenantCursor is the start.
type TenantCursor struct {
	At     time.Time
	Tenant string
}

// IsZero says c is the start of a cycle.
func (c TenantCursor) IsZero() bool { return c.At.IsZero() && c.Tenant == "" }

// DueWindow is one window of the tenants with due rows (tenant_queue).
type DueWindow struct {
	// Due lists them oldest first, at most the window; At[i] is Due[i]'s
	// next due time, for the cursor.
	Due []string
	At  []time.Time
	// Complete says the window reached the last due tenant: the next walk
	// starts a new cycle.
	Complete bool
	// NextDue is when the earliest tenant with nothing due falls due
	// (zero: none has PENDING rows).
	NextDue time.Time
}

// CursorAt is the cursor just after the walk's i-th tenant.
func (w DueWindow) CursorAt(i int) TenantCursor { return TenantCursor{At: w.At[i], Tenant: w.Due[i]} }

// walkFold is how many wakeups one walk folds into tenant_queue at most: a
// burst of creates across more tenants is folded over the next walks.
const walkFold = 20_000

// DueTenants folds the writers' wakeups into tenant_queue and returns at
// most max tenants with due rows after cursor, in (next due time, tenant)
// order, and when the next tenant falls due: one statement
// (paysched_due_tenants), whose cost is what it folds and returns, never
// the number of tenants. An idle poll is this statement alone.
func (c *Claimer) DueTenants(ctx context.Context, cursor TenantCursor, max int) (DueWindow, error) {
	at := cursor.At
	if cursor.IsZero() {
		at = time.Unix(0, 0) // before any run_at (and a plain timestamptz)
	}
	rows, err := c.DB.Query(ctx, `SELECT tenant, next_at, due FROM paysched_due_tenants($1, $2, $3, $4)`,
		at, cursor.Tenant, max, walkFold)
	if err != nil {
		return DueWindow{}, fmt.Errorf("walk due tenants: %w", err)
	}
	var w DueWindow
	var tenant string
	var next time.Time
	var due bool
	_, err = pgx.ForEachRow(rows, []any{&tenant, &next, &due}, func() error {
		if due {
			w.Due, w.At = append(w.Due, tenant), append(w.At, next)
		} else {
			w.NextDue = next
		}
		return nil
	})
	if err != nil {
		return DueWindow{}, fmt.Errorf("walk due tenants: %w", err)
	}
	w.Complete = len(w.Due) < max
	return w, nil
}

// SettleTenants tells tenant_queue that tenants' shares came back short:
// each one's next due time is read again from its PENDING rows (or it
// leaves the queue). One statement; it never waits on a lock.
func (c *Claimer) SettleTenants(ctx context.Context, tenants []string) error {
	if len(tenants) == 0 {
		return nil
	}
	if _, err := c.DB.Exec(ctx, `SELECT paysched_settle_tenants($1)`, tenants); err != nil {
		return fmt.Errorf("settle tenants: %w", err)
	}
	return nil
}

// Peeked is what a fair claim saw past its shares, by tenant.
type Peeked struct {
	// Spent: the tenant took its whole share in the last partition the
	// claim reaches, and the peek found no due row after it there: it is
	// drained, without a round that claims nothing to say so.
	Spent map[string]bool
	// Held: the tenant came back short of its share, and due rows of its
	// are held by another transaction: it is not drained, and a settle
	// would find it due.
	Held map[string]bool
}

// ClaimTenants claims up to each share's quota of its tenant's due rows,
// oldest partition first, in every partition that may hold a due row
// (one statement each, while a share is left), and says what it peeked
// past the shares. On an error it still returns the claims made before it
// (they are held).
func (c *Claimer) ClaimTenants(ctx context.Context, shares []Share) ([]Claimed, Peeked, error) {
	peek := Peeked{Spent: map[string]bool{}, Held: map[string]bool{}}
	days, err := c.days(ctx)
	if err != nil {
		return nil, peek, fmt.Errorf("claim shares: %w", err)
	}
	left := make(map[string]int, len(shares))
	for _, s := range shares {
		if s.Quota > 0 {
			left[s.Tenant] += s.Quota
		}
	}
	var out []Claimed
	more := map[string]bool{}
	for i, d := range days {
		var tenants []string
		var quotas []int32
		for _, s := range shares {
			if q := left[s.Tenant]; q > 0 { // the shares name each tenant once
				tenants, quotas = append(tenants, s.Tenant), append(quotas, int32(q))
			}
		}
		if len(tenants) == 0 {
			break
		}
		rows, err := c.DB.Query(ctx, partitionSQL(fairClaimSQL, d), c.Owner, c.Lease, tenants, quotas)
		if missingPartition(err) {
			continue
		}
		if err != nil {
			return out, peek, fmt.Errorf("claim shares in %s: %w", Partition(d), err)
		}
		var id pgtype.UUID
		var due, runAt pgtype.Timestamptz
		var attempt pgtype.Int4
		var tenant string
		var kind int32
		_, err = pgx.ForEachRow(rows, []any{&id, &due, &runAt, &attempt, &tenant, &kind}, func() error {
			switch kind {
			case 0:
				out = append(out, Claimed{ID: uuid.UUID(id.Bytes), DueTime: due.Time, RunAt: runAt.Time, Attempt: attempt.Int32, Tenant: tenant})
				if left[tenant]--; left[tenant] == 0 && i == len(days)-1 {
					peek.Spent[tenant] = true // unless the peek finds more
				}
			case 1:
				more[tenant] = true
			case 2:
				peek.Held[tenant] = true
			}
			return nil
		})
		if err != nil && !missingPartition(err) {
			return out, peek, fmt.Errorf("claim shares in %s: %w", Partition(d), err)
		}
	}
	for t := range more {
		delete(peek.Spent, t)
	}
	return out, peek, nil
}

// Share is how many due rows of one tenant a fair claim may take.
type Share struct {
	Tenant string
	Quota  int
}

// inflightSQL counts one partition's (%s) claims in flight for the tenants
// $1, through the lease index: it reads the leased rows, which are the
// claims out (thousands at a spike, not the due backlog).
const inflightSQL = `SELECT tenant, count(*) FROM %s WHERE lease_until IS NOT NULL AND status = 'PROCESSING'
AND tenant = ANY($1) GROUP BY tenant`

// InFlight counts, across every sweeper, the payments of tenants claimed
// and not yet settled (PROCESSING), in one round trip over the partitions
// that may hold a claim.
func (c *Claimer) InFlight(ctx context.Context, tenants []string) (map[string]int, error) {
	out := make(map[string]int, len(tenants))
	if len(tenants) == 0 {
		return out, nil
	}
	days, err := c.days(ctx)
	if err != nil {
		return nil, fmt.Errorf("count in flight: %w", err)
	}
	b := &pgx.Batch{}
	for _, d := range days {
		b.Queue(partitionSQL(inflightSQL, d), tenants)
	}
	res := c.DB.SendBatch(ctx, b)
	defer res.Close()
	for _, d := range days {
		rows, err := res.Query()
		if err == nil {
			var t string
			var n int
			_, err = pgx.ForEachRow(rows, []any{&t, &n}, func() error {
				out[t] += n
				return nil
			})
		}
		if err != nil && !missingPartition(err) {
			return nil, fmt.Errorf("count in flight in %s: %w", Partition(d), err)
		}
	}
	return out, nil
}
