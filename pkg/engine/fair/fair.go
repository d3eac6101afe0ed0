// Package fair shares a sweeper's claims among tenants: deficit
// round-robin by weight over the tenants that have due payments, with
// per-tenant caps on payments in flight and on claims per second. The
// statements are the store's (store.Claimer.WalkTenants, ClaimShares);
// this package decides how many rows each tenant gets in a round. The
// algorithm and its cost are in docs/DESIGN.md, "Fair claims".
package fair

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/paysched/paysched/pkg/engine/pacing"
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
	// Walk is how many tenants one walk visits at most (default 256).
	Walk int
	// WalkEvery is how often the tenants with due rows are walked again
	// (default 200ms); between walks a round uses the last walk's tenants,
	// less those found drained. A tenant newly due waits at most this
	// long for its first share.
	WalkEvery time.Duration
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
	case c.WalkEvery < 0:
		return fmt.Errorf("--fair-walk-every must not be negative, got %s", c.WalkEvery)
	case c.Reload < 0:
		return fmt.Errorf("tenant limits reload interval must not be negative, got %s", c.Reload)
	}
	return nil
}

// Scheduler shares one sweeper's claims among tenants. Claim is called
// from the sweeper's loop only; Done from any goroutine.
type Scheduler struct {
	cfg Config
	db  store.DB

	deficit  map[string]float64
	backlog  map[string]bool // took its whole share last round: it has more
	cursor   string
	walk     store.Walk // the last walk, less the tenants since found drained
	walkedAt time.Time
	stale    bool // the due-order remainder met a tenant the walk did not list
	rot      int  // where handing out spare starts
	limits   map[string]Limits
	capped   bool // some tenant has a cap: the due-order remainder is off
	loadedAt time.Time

	// others is, per capped tenant, what other sweepers had in flight at
	// the last walk (the cluster's count less this sweeper's own).
	others map[string]int

	mu       sync.Mutex
	inflight map[string]int
	stats    map[string]*tenantStats // claims by tenant, for the metrics
}

// New makes a scheduler reading tenant limits from db.
func New(cfg Config, db store.DB) (*Scheduler, error) {
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
	if cfg.WalkEvery == 0 {
		cfg.WalkEvery = 200 * time.Millisecond
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
	return s.walk.NextDue
}

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
	s.capped = d.MaxInflight > 0 || d.MaxRate > 0
	for _, l := range ls {
		x := Limits{Weight: l.Weight, MaxInflight: d.MaxInflight, MaxRate: d.MaxRate}
		if l.MaxInflight != nil {
			x.MaxInflight = *l.MaxInflight
		}
		if l.MaxRate != nil {
			x.MaxRate = *l.MaxRate
		}
		s.capped = s.capped || x.MaxInflight > 0 || x.MaxRate > 0
		s.limits[l.Tenant] = x
	}
	s.loadedAt = time.Now()
	return nil
}

// Claim claims up to limit due payments with c, shared among the tenants
// that have due payments (see the package comment). On an error it still
// returns the claims made before it: they are held and must go out.
func (s *Scheduler) Claim(ctx context.Context, c *store.Claimer, limit int) ([]store.Claimed, error) {
	if s.cfg.Unfair {
		out, err := c.Claim(ctx, limit)
		s.taken(out)
		return out, err
	}
	if err := s.reload(ctx); err != nil {
		return nil, fmt.Errorf("fair claim: %w", err)
	}
	// Walk again when the last walk is old, missed a tenant, found nothing
	// due (a spike may have just begun), or a tenant it saw has fallen due
	// since: the first round of a spike is shared, not due order.
	now := time.Now()
	nextDue := s.walk.NextDue
	if s.stale || now.Sub(s.walkedAt) >= s.cfg.WalkEvery || len(s.walk.Due) == 0 ||
		(!nextDue.IsZero() && !now.Before(nextDue)) {
		w, err := c.WalkTenants(ctx, s.cursor, s.cfg.Walk)
		if err != nil {
			return nil, fmt.Errorf("fair claim: %w", err)
		}
		s.walk, s.walkedAt, s.stale, s.cursor = w, time.Now(), false, w.Next
		if err := s.countOthers(ctx, c); err != nil {
			return nil, fmt.Errorf("fair claim: %w", err)
		}
	}
	w := s.walk
	shares, rated := s.share(w, limit)
	var rateBuckets []pacing.Bucket
	var rateWant []int
	for _, i := range rated {
		l := s.Limits(shares[i].Tenant)
		rateBuckets = append(rateBuckets, pacing.Bucket{Name: "tenant:" + shares[i].Tenant, Rate: l.MaxRate, Burst: max(l.MaxRate, 1)})
		rateWant = append(rateWant, shares[i].Quota)
	}
	if len(rated) > 0 {
		granted, err := pacing.TakeEach(ctx, s.db, rateBuckets, rateWant)
		if err != nil {
			return nil, fmt.Errorf("fair claim: %w", err)
		}
		for j, i := range rated {
			shares[i].Quota = granted[j]
		}
	}
	out, err := c.ClaimShares(ctx, w, shares)
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
	filled := false
	for _, sh := range shares {
		switch n := got[sh.Tenant]; {
		case sh.Quota <= 0:
		case n < sh.Quota:
			// Fewer due than its share (or held by another sweeper): no
			// backlog, so no credit carried (deficit round-robin), and no
			// share until the next walk finds it due again.
			s.deficit[sh.Tenant] = 0
			delete(s.backlog, sh.Tenant)
			s.drop(sh.Tenant)
		default:
			s.deficit[sh.Tenant] = max(0, s.deficit[sh.Tenant]-float64(n))
			s.backlog[sh.Tenant] = true
			filled = true
		}
	}
	for t := range s.deficit {
		if _, due := s.walk.DueIn[t]; !due && s.walk.Complete {
			delete(s.deficit, t)
			delete(s.backlog, t)
		}
	}
	if err == nil && len(out) < limit && !s.capped && (filled || !w.Complete || len(w.Due) == 0) {
		// What the shares left goes in due order: to the backlogged
		// tenants (the oldest first), and to any tenant the last walk did
		// not reach or list. With a cap in force it is not used: it would
		// claim a capped tenant's rows.
		var more []store.Claimed
		more, err = c.Claim(ctx, limit-len(out))
		for _, cl := range more {
			if _, listed := s.walk.DueIn[cl.Tenant]; !listed {
				s.stale = true // walk again next round: it has due rows
			}
		}
		out = append(out, more...)
	}
	s.taken(out)
	if err != nil {
		return out, fmt.Errorf("fair claim: %w", err)
	}
	return out, nil
}

// share decides each due tenant's quota of a round of limit rows, and
// which shares (by index) a rate cap must grant.
func (s *Scheduler) share(w store.Walk, limit int) ([]store.Share, []int) {
	s.mu.Lock()
	room := make([]int, len(w.Due))
	for i, t := range w.Due {
		room[i] = limit
		if l := s.Limits(t); l.MaxInflight > 0 {
			room[i] = max(0, min(limit, l.MaxInflight-s.others[t]-s.inflight[t]))
		}
	}
	s.mu.Unlock()
	sumW := 0
	for i, t := range w.Due {
		if room[i] > 0 {
			sumW += s.Limits(t).Weight
		}
	}
	shares := make([]store.Share, 0, len(w.Due))
	var rated []int
	left := limit
	// From a rotating start: the shares' order is the order their rows
	// come back in, and so the order the executor starts them within the
	// batch; a fixed order (by name) would start the same tenants first in
	// every round.
	s.rot++
	for k := range w.Due {
		i := (k + s.rot) % len(w.Due)
		t := w.Due[i]
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
		if l.MaxRate > 0 {
			rated = append(rated, len(shares))
		}
		shares = append(shares, store.Share{Tenant: t, Quota: q})
	}
	// What is left (a cap held a tenant back, or credit was fractional)
	// goes to the tenants with room, by weight, backlogged ones (they took
	// their whole share last round) first: no credit, it is spare, not
	// owed. The spike's big tenant takes the rest of the round in the same
	// statement as the others' shares, instead of in a second, due-order
	// claim.
	for _, backlogOnly := range []bool{true, false} {
		left = s.spare(w, room, shares, left, backlogOnly)
	}
	return shares, rated
}

// spare hands left rows to the due tenants with room, by weight (only
// backlogged ones if backlogOnly), and returns what is still left.
func (s *Scheduler) spare(w store.Walk, room []int, shares []store.Share, left int, backlogOnly bool) int {
	idx := make(map[string]int, len(shares)) // the shares never change order here
	for j, sh := range shares {
		idx[sh.Tenant] = j
	}
	for left > 0 && (backlogOnly || s.capped) {
		sumW := 0
		for i, t := range w.Due {
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
		for k := range w.Due {
			i := (k + s.rot) % len(w.Due)
			t := w.Due[i]
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
func (s *Scheduler) countOthers(ctx context.Context, c *store.Claimer) error {
	clear(s.others)
	var capped []string
	for _, t := range s.walk.Due {
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

// drop removes tenant from the cached walk: it has nothing more due.
func (s *Scheduler) drop(tenant string) {
	if _, ok := s.walk.DueIn[tenant]; !ok {
		return
	}
	delete(s.walk.DueIn, tenant)
	for i, t := range s.walk.Due {
		if t == tenant {
			s.walk.Due = append(s.walk.Due[:i:i], s.walk.Due[i+1:]...)
			break
		}
	}
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
