// Package fair shares a sweeper's claims among tenants: deficit
// round-robin by weight over the tenants that have due payments, with
// per-tenant caps on payments in flight and on claims per second. The
// statements are the store's (store.Claimer.DueTenants, ClaimTenants,
// SettleTenants); this package decides how many rows each tenant gets in
// a round. The algorithm and its cost are in docs/DESIGN.md, "Fair
// claims".
package fair

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paysched/paysched/pkg/engine/pacing"
	"github.com/paysched/paysched/pkg/platform/pgdb"
	"github.com/paysched/paysched/pkg/store"
)

// Limits are one tenant's claim limits.
type Limits struct {
	// Weight is the tenant's share of a round, relative to the others'.
	Weight int
	// MaxInflight caps its payments claimed and not yet settled, across
	// every sweeper (counted at each walk, plus this sweeper's own claims
	// since); 0: no cap.
	MaxInflight int
	// MaxRate caps its claims per second, across every sweeper; 0: no cap.
	MaxRate float64
}

// Config tunes the scheduler.
type Config struct {
	// Unfair claims in due order only, whoever the tenant (the engine
	// before fairness; bench-fair compares the two).
	Unfair bool
	// Walk is how many due tenants one window holds at most (default
	// 256): a round's statements and Go state grow with it, and a due
	// tenant is reached within ceil(due tenants / Walk) windows.
	Walk int
	// Default is the limits of a tenant an operator set nothing for.
	Default Limits
	// Reload is how often the operators' limits are read again (default 5s).
	Reload time.Duration
}

// Validate says what is wrong with c, in flag terms.
func (c Config) Validate() error {
	switch {
	case c.Walk < 0:
		return fmt.Errorf("--fair-walk must not be negative, got %d", c.Walk)
	case c.Default.Weight < 0:
		return fmt.Errorf("tenant weight must be at least 1, got %d", c.Default.Weight)
	case c.Default.MaxInflight < 0:
		return fmt.Errorf("--tenant-max-inflight must not be negative (0: no cap), got %d", c.Default.MaxInflight)
	case c.Default.MaxRate < 0:
		return fmt.Errorf("--tenant-max-rate must not be negative (0: no cap), got %g", c.Default.MaxRate)
	case math.IsNaN(c.Default.MaxRate) || math.IsInf(c.Default.MaxRate, 0):
		return fmt.Errorf("--tenant-max-rate must be a number, got %g", c.Default.MaxRate)
	case c.Reload < 0:
		return fmt.Errorf("tenant limits reload interval must not be negative, got %s", c.Reload)
	}
	return nil
}

// Scheduler shares one sweeper's claims among tenants. Claim is called
// from the sweeper's loop only; Done from any goroutine.
type Scheduler struct {
	cfg Config
	db  pgdb.DB

	// Per tenant of the window last walked, and only those: the state of
	// a round is bounded by the window, never by the tenants seen.
	deficit map[string]float64
	backlog map[string]bool // took its whole share last round: it has more

	cursor   store.TenantCursor // where the next walk of the due tenants starts
	cutShort bool               // the last Claim stopped at its bounds with windows left
	// passedSettling: this Claim passed by tenants awaiting a settle.
	passedSettling bool
	nextDue        time.Time // by the last walk, when the next tenant falls due
	rot            int       // where handing out spare starts
	limits         map[string]Limits
	loadedAt       time.Time

	// others is, per capped tenant, what other sweepers had in flight at
	// the last walk (the cluster's count less this sweeper's own).
	others map[string]int

	settle settler
	// queued counts the tenants handed to a settle, spared those the
	// claim's peek kept from one (their due rows held elsewhere).
	queued, spared atomic.Int64

	mu       sync.Mutex
	inflight map[string]int
	stats    map[string]*tenantStats // claims by tenant, for the metrics
}

// New makes a scheduler reading tenant limits from db.
func New(cfg Config, db pgdb.DB) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Walk == 0 {
		cfg.Walk = 256
	}
	if cfg.Default.Weight == 0 {
		cfg.Default.Weight = 1
	}
	if cfg.Reload == 0 {
		cfg.Reload = 5 * time.Second
	}
	return &Scheduler{cfg: cfg, db: db, deficit: map[string]float64{}, inflight: map[string]int{}, others: map[string]int{},
		backlog: map[string]bool{}, stats: map[string]*tenantStats{other: {}}}, nil
}

// NextDue is when, by the last walk, a tenant with nothing due yet falls
// due (zero: unknown): an idle sweeper need not sleep past it.
func (s *Scheduler) NextDue() time.Time {
	if s.cfg.Unfair {
		return time.Time{}
	}
	return s.nextDue
}

// CutShort says the last Claim stopped at its bounds (maxWindows,
// claimBudget) with windows left to walk: claim again at once, not after
// a cooldown.
func (s *Scheduler) CutShort() bool { return s.cutShort }

// Limits returns the limits the scheduler applies to tenant.
func (s *Scheduler) Limits(tenant string) Limits {
	if l, ok := s.limits[tenant]; ok {
		return l
	}
	return s.cfg.Default
}

func (s *Scheduler) reload(ctx context.Context) error {
	if !s.loadedAt.IsZero() && time.Since(s.loadedAt) < s.cfg.Reload {
		return nil
	}
	ls, err := store.LoadTenantLimits(ctx, s.db)
	if err != nil {
		return err
	}
	d := s.cfg.Default
	s.limits = make(map[string]Limits, len(ls))
	for _, l := range ls {
		x := Limits{Weight: l.Weight, MaxInflight: d.MaxInflight, MaxRate: d.MaxRate}
		if l.MaxInflight != nil {
			x.MaxInflight = *l.MaxInflight
		}
		if l.MaxRate != nil {
			x.MaxRate = *l.MaxRate
		}
		s.limits[l.Tenant] = x
	}
	s.loadedAt = time.Now()
	return nil
}

// maxWindows bounds the windows one Claim walks, and so does a quarter of
// the time its context allows (the sweeper's: the lease): past either it
// returns what it claimed, which goes out at once (its leases are
// running), and the next Claim goes on from the cursor.
const maxWindows = 64

// Claim claims up to limit due payments with c, shared among the tenants
// that have due payments (see the package comment). On an error it still
// returns the claims made before it: they are held and must go out.
//
// It walks the due tenants a window at a time from its cursor. A window
// that holds every due tenant is shared by weight (deficit round-robin),
// and again while rows are left and some tenant filled its share; a
// window of a longer cycle is shared in walk order and the cursor moves
// past the tenants served, so each due tenant is reached within
// ceil(due tenants / Walk) windows. Rows left over go to the next window
// in the same Claim: a due row never waits while this sweeper and its
// tenant have room (work-conserving, caps or not).
func (s *Scheduler) Claim(ctx context.Context, c *store.Claimer, limit int) ([]store.Claimed, error) {
	if s.cfg.Unfair {
		out, err := c.Claim(ctx, limit)
		s.taken(out)
		return out, err
	}
	if err := s.reload(ctx); err != nil {
		return nil, fmt.Errorf("fair claim: %w", err)
	}
	var out []store.Claimed
	wrapped := false             // this Claim has walked to the end of a cycle
	drained := map[string]bool{} // found short in this Claim: settled in the background, out of its next windows
	var budget time.Time         // zero: no deadline, no budget
	if dl, ok := ctx.Deadline(); ok {
		budget = time.Now().Add(time.Until(dl) / 4)
	}
	s.cutShort = false
	skip := true // pass by the tenants awaiting a settle
	s.passedSettling = false
	for pass := 0; len(out) < limit; pass++ {
		if pass == maxWindows || (pass > 0 && !budget.IsZero() && !time.Now().Before(budget)) {
			s.cutShort = true
			break
		}
		got, more, err := s.round(ctx, c, limit-len(out), limit, &wrapped, drained, skip)
		out = append(out, got...)
		if err != nil {
			s.taken(out)
			return out, fmt.Errorf("fair claim: %w", err)
		}
		if !more && skip && s.passedSettling && len(out) < limit {
			// Tenants awaiting a settle were passed by, and there is room:
			// a row of theirs may have come due since they were found
			// short (a release, a retry). Walk once more with them in.
			skip, wrapped = false, false
			s.cursor = store.TenantCursor{}
			continue
		}
		if !more {
			break
		}
	}
	s.taken(out)
	return out, nil
}

// round walks one window from the cursor, shares limit rows (of the
// claim's claimLimit) among its tenants, claims them and settles the
// tenants found short. more says
// another window may have rows for what is left.
func (s *Scheduler) round(ctx context.Context, c *store.Claimer, limit, claimLimit int, wrapped *bool, drained map[string]bool,
	skipSettling bool) (_ []store.Claimed, more bool, _ error) {
	start := s.cursor
	w, err := c.DueTenants(ctx, start, s.cfg.Walk)
	if err != nil {
		return nil, false, err
	}
	s.nextDue = w.NextDue
	whole := start.IsZero() && w.Complete // the window is every due tenant
	walked := len(w.Due)
	var end store.TenantCursor // just past the whole window, before the filter
	if walked > 0 {
		end = w.CursorAt(walked - 1)
	}
	// Tenants found short, in this Claim or before, whose settles have
	// not run yet, have no due rows: out of the window. Without this each
	// Claim after a spike of many small tenants walked and probed all of
	// them again until the background settles caught up (the 10,000-tenant
	// case drained at a few hundred rows a second).
	var passed bool
	w.Due, w.At, passed = s.settle.skip(w.Due, w.At, drained, skipSettling)
	s.passedSettling = s.passedSettling || passed
	if w.Complete {
		s.cursor = store.TenantCursor{}
	}
	if len(w.Due) == 0 && walked > 0 && !w.Complete {
		// A window of settling tenants only: go on past it.
		s.cursor = end
		return nil, true, nil
	}
	if len(w.Due) == 0 {
		if start.IsZero() {
			return nil, false, nil // nothing due at all: an idle poll
		}
		// The end of a cycle: go round once more from the start, unless
		// this Claim has already been there.
		more = !*wrapped
		*wrapped = true
		return nil, more, nil
	}
	s.prune(w.Due)
	if err := s.countOthers(ctx, c, w.Due); err != nil {
		return nil, false, err
	}
	shares, last, ran := s.share(w.Due, limit, whole)
	if !whole && !w.Complete {
		// The next window starts after the last tenant this one reached.
		s.cursor = w.CursorAt(last)
	}
	var rateBuckets []pacing.Bucket
	var rateWant []int
	var rated []int
	for i, sh := range shares {
		if l := s.Limits(sh.Tenant); l.MaxRate > 0 && sh.Quota > 0 {
			rated = append(rated, i)
			rateBuckets = append(rateBuckets, pacing.Bucket{Name: "tenant:" + sh.Tenant, Rate: l.MaxRate, Burst: max(l.MaxRate, 1)})
			rateWant = append(rateWant, sh.Quota)
		}
	}
	if len(rated) > 0 {
		granted, err := pacing.TakeEach(ctx, s.db, rateBuckets, rateWant)
		if err != nil {
			return nil, false, err
		}
		for j, i := range rated {
			shares[i].Quota = granted[j]
		}
	}
	out, peek, err := c.ClaimTenants(ctx, shares)
	got := make(map[string]int, len(shares))
	for _, cl := range out {
		got[cl.Tenant]++
	}
	if len(rated) > 0 {
		back := make([]int, len(rated))
		for j, i := range rated {
			back[j] = shares[i].Quota - got[shares[i].Tenant]
		}
		_ = pacing.RefundEach(context.WithoutCancel(ctx), s.db, rateBuckets, back)
	}
	if err != nil {
		return out, false, err
	}
	filled := false
	var short []string
	for _, sh := range shares {
		switch n := got[sh.Tenant]; {
		case sh.Quota <= 0:
		case n < sh.Quota:
			// Fewer due than its share: no backlog, so no credit carried
			// (deficit round-robin), and out of this Claim's windows.
			s.deficit[sh.Tenant] = 0
			delete(s.backlog, sh.Tenant)
			drained[sh.Tenant] = true
			if peek.Held[sh.Tenant] {
				// The peek saw due rows of its held by another sweeper:
				// it is not drained, and a settle would find it due.
				s.spared.Add(1)
				continue
			}
			// Its next due time is read again.
			short = append(short, sh.Tenant)
		case peek.Spent[sh.Tenant]:
			// It took its whole share and the peek found no due row after
			// it: drained now, settled now, not found short by a round
			// that claims nothing.
			s.deficit[sh.Tenant] = 0
			delete(s.backlog, sh.Tenant)
			short = append(short, sh.Tenant)
			drained[sh.Tenant] = true
		default:
			s.deficit[sh.Tenant] = max(0, s.deficit[sh.Tenant]-float64(n))
			s.backlog[sh.Tenant] = true
			filled = true
		}
	}
	s.queued.Add(int64(len(short)))
	s.settle.add(s.db, short)
	if ran && !whole && len(shares) > 0 && (last > 0 || limit < claimLimit) {
		// The round's rows ran out at the last tenant reached, and it took
		// all it was given: it has more, and its turn was cut short (by the
		// rows before it in this window, or by what earlier windows of the
		// claim took). The next window starts at it, not past it; before,
		// a tenant that fell at the end of a claim's rows was given what
		// was left (a row, say) and then waited a whole cycle. Never when
		// it was the first of a full round: the cursor always moves on by
		// a tenant, so every due tenant is still reached.
		if sh := shares[len(shares)-1]; got[sh.Tenant] == sh.Quota {
			if last > 0 {
				s.cursor = w.CursorAt(last - 1)
			} else {
				s.cursor = start
			}
		}
	}
	switch {
	case len(out) >= limit:
		return out, false, nil
	case whole:
		// Every due tenant had its share: go again only for the ones that
		// filled theirs (they have more), with what is left.
		return out, filled, nil
	case w.Complete:
		more = !*wrapped || len(out) > 0
		*wrapped = true
		return out, more, nil
	}
	return out, true, nil
}

// Settles says how many tenants found short were handed to a settle, and
// how many the claims' peek spared one, since the scheduler was made.
func (s *Scheduler) Settles() (queued, spared int64) { return s.queued.Load(), s.spared.Load() }

// prune forgets the credit of tenants outside the window.
func (s *Scheduler) prune(window []string) {
	if len(s.deficit) == 0 && len(s.backlog) == 0 {
		return
	}
	in := make(map[string]struct{}, len(window))
	for _, t := range window {
		in[t] = struct{}{}
	}
	for t := range s.deficit {
		if _, ok := in[t]; !ok {
			delete(s.deficit, t)
		}
	}
	for t := range s.backlog {
		if _, ok := in[t]; !ok {
			delete(s.backlog, t)
		}
	}
}

// share decides each due tenant's quota of a round of limit rows. A whole
// window (every due tenant) is shared by weight with the credit carried
// between rounds, from a rotating start, and what is left goes to the
// tenants with room as spare. A window of a longer cycle is shared in walk
// order, each tenant at least one row while rows are left: last is the
// index of the last tenant reached, where the cursor goes on from, and ran
// says the round's rows ran out at it.
func (s *Scheduler) share(due []string, limit int, whole bool) (shares []store.Share, last int, ran bool) {
	s.mu.Lock()
	room := make([]int, len(due))
	for i, t := range due {
		room[i] = limit
		if l := s.Limits(t); l.MaxInflight > 0 {
			room[i] = max(0, min(limit, l.MaxInflight-s.others[t]-s.inflight[t]))
		}
	}
	s.mu.Unlock()
	sumW := 0
	for i, t := range due {
		if room[i] > 0 {
			sumW += s.Limits(t).Weight
		}
	}
	shares = make([]store.Share, 0, len(due))
	left := limit
	if !whole {
		last = len(due) - 1
		for i, t := range due {
			if left == 0 {
				last = i - 1
				break
			}
			if room[i] == 0 {
				continue // at its cap: passed, its turn comes next cycle
			}
			q := min(room[i], left, max(1, limit*s.Limits(t).Weight/sumW))
			left -= q
			shares = append(shares, store.Share{Tenant: t, Quota: q})
			if left == 0 {
				last, ran = i, true
				break
			}
		}
		return shares, last, ran
	}
	// From a rotating start: the shares' order is the order their rows
	// come back in, and so the order the executor starts them within the
	// batch; a fixed order would start the same tenants first in every
	// round.
	s.rot++
	for k := range due {
		i := (k + s.rot) % len(due)
		t := due[i]
		l := s.Limits(t)
		if room[i] == 0 || sumW == 0 {
			continue
		}
		quantum := float64(limit) * float64(l.Weight) / float64(sumW)
		// Credit carried is bounded: a tenant held back by its caps does
		// not bank a burst.
		d := min(s.deficit[t]+quantum, 2*quantum+1)
		s.deficit[t] = d
		q := min(int(d), room[i], left)
		if q <= 0 {
			continue
		}
		left -= q
		shares = append(shares, store.Share{Tenant: t, Quota: q})
	}
	// What is left (a cap held a tenant back, or credit was fractional)
	// goes to the tenants with room, by weight, backlogged ones (they took
	// their whole share last round) first: no credit, it is spare, not
	// owed. The spike's big tenant takes the rest of the round in the same
	// statement as the others' shares.
	for _, backlogOnly := range []bool{true, false} {
		left = s.spare(due, room, shares, left, backlogOnly)
	}
	return shares, len(due) - 1, false
}

// spare hands left rows to the due tenants with room, by weight (only
// backlogged ones if backlogOnly), and returns what is still left.
func (s *Scheduler) spare(due []string, room []int, shares []store.Share, left int, backlogOnly bool) int {
	idx := make(map[string]int, len(shares)) // the shares never change order here
	for j, sh := range shares {
		idx[sh.Tenant] = j
	}
	for left > 0 {
		sumW := 0
		for i, t := range due {
			j, ok := idx[t]
			if room[i] > 0 && (!ok || shares[j].Quota < room[i]) && (!backlogOnly || s.backlog[t]) {
				sumW += s.Limits(t).Weight
			}
		}
		if sumW == 0 {
			break
		}
		gave := 0
		// From a rotating start: what is handed out one by one (less than
		// a tenant's weight's worth) does not favour the first names.
		s.rot++
		for k := range due {
			i := (k + s.rot) % len(due)
			t := due[i]
			j, ok := idx[t]
			// Only tenants already given a share take spare; one without
			// (no whole credit yet) waits for its turn.
			if !ok || room[i] <= shares[j].Quota || left == 0 || (backlogOnly && !s.backlog[t]) {
				continue
			}
			extra := min(room[i]-shares[j].Quota, left, max(1, left*s.Limits(t).Weight/sumW))
			shares[j].Quota += extra
			left -= extra
			gave += extra
		}
		if gave == 0 {
			break
		}
	}
	return left
}

// countOthers counts, for the due tenants with an in-flight cap, what the
// other sweepers hold: the cluster's count less this sweeper's own.
func (s *Scheduler) countOthers(ctx context.Context, c *store.Claimer, due []string) error {
	clear(s.others)
	var capped []string
	for _, t := range due {
		if s.Limits(t).MaxInflight > 0 {
			capped = append(capped, t)
		}
	}
	if len(capped) == 0 {
		return nil
	}
	n, err := c.InFlight(ctx, capped)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range capped {
		s.others[t] = max(0, n[t]-s.inflight[t])
	}
	return nil
}

func (s *Scheduler) taken(cs []store.Claimed) {
	if len(cs) == 0 {
		return
	}
	s.mu.Lock()
	for _, c := range cs {
		s.inflight[c.Tenant]++
	}
	s.observe(cs, time.Now())
	s.mu.Unlock()
}

// Done says n of tenant's claims are settled (their outcomes came back,
// or their batch was given up to its lease).
func (s *Scheduler) Done(tenant string, n int) {
	s.mu.Lock()
	if s.inflight[tenant] -= n; s.inflight[tenant] <= 0 {
		delete(s.inflight, tenant)
	}
	s.mu.Unlock()
}

// Inflight returns this sweeper's claims not yet settled, by tenant.
func (s *Scheduler) Inflight() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.inflight))
	for t, n := range s.inflight {
		out[t] = n
	}
	return out
}

// settler settles the tenants found short in the background, one batch
// at a time, off the claim's path: a settle reads a drained tenant's
// oldest PENDING row, which after a spike may pass the index entries of
// 200,000 rows claimed since, and a claim must not wait for it. Until it
// runs the tenant stays in the walk and its shares come back empty; the
// queue's bound holds either way.
type settler struct {
	mu      sync.Mutex
	pending map[string]struct{}
	// running is the batch being settled (nil: no goroutine runs).
	running map[string]struct{}
}

// skip drops from a window (due, with their cursors at) the tenants in
// drained and, if settling, those waiting for their settle; passed says
// some of the latter were dropped.
func (st *settler) skip(due []string, at []time.Time, drained map[string]bool, settling bool) (_ []string, _ []time.Time, passed bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(drained) == 0 && (!settling || len(st.pending) == 0 && len(st.running) == 0) {
		return due, at, false
	}
	keep, keepAt := due[:0:0], at[:0:0]
	for i, t := range due {
		_, p := st.pending[t]
		_, r := st.running[t]
		switch {
		case drained[t]:
		case settling && (p || r):
			passed = true
		default:
			keep, keepAt = append(keep, t), append(keepAt, at[i])
		}
	}
	return keep, keepAt, passed
}

// settleBatch is how many tenants one settle statement takes.
const settleBatch = 256

func (st *settler) add(db pgdb.DB, tenants []string) {
	if len(tenants) == 0 {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.pending == nil {
		st.pending = map[string]struct{}{}
	}
	for _, t := range tenants {
		st.pending[t] = struct{}{}
	}
	if st.running == nil {
		st.running = map[string]struct{}{}
		go st.run(db)
	}
}

func (st *settler) run(db pgdb.DB) {
	c := &store.Claimer{DB: db}
	for {
		st.mu.Lock()
		clear(st.running) // the last batch is settled (or will be tried again when found short)
		batch := make([]string, 0, min(len(st.pending), settleBatch))
		for t := range st.pending {
			if len(batch) == settleBatch {
				break
			}
			batch = append(batch, t)
			delete(st.pending, t)
			st.running[t] = struct{}{}
		}
		if len(batch) == 0 {
			st.running = nil
			st.mu.Unlock()
			return
		}
		st.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = c.SettleTenants(ctx, batch) // a failed settle is tried again when the tenant is next found short
		cancel()
	}
}
