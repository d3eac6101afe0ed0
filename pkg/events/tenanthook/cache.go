package tenanthook

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/paysched/paysched/pkg/events/tenanthook/deliverydb"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// target is what an attempt needs of its endpoint, as the cache last read
// it: a snapshot, replaced whole when the endpoint changes.
type target struct {
	ID          uuid.UUID
	Tenant      string
	URL         string
	Types       []string // empty: every type
	Enabled     bool
	Secrets     []string // newest first
	RotateUntil *time.Time
	MaxInflight int
	PerSecond   float64
	// FailingSince as read at Read; the lane keeps what this process
	// wrote since.
	FailingSince *time.Time
	Read         time.Time
}

// wants says whether t subscribes to events of typ.
func (t *target) wants(typ string) bool {
	return len(t.Types) == 0 || slices.Contains(t.Types, typ)
}

// signing is the secrets that sign now: both while a rotation overlaps,
// the newest alone after it.
func (t *target) signing(now time.Time) []string {
	if t.RotateUntil != nil && now.After(*t.RotateUntil) && len(t.Secrets) > 1 {
		return t.Secrets[:1]
	}
	return t.Secrets
}

// targets is the endpoint cache: every endpoint, by id and by tenant, read
// whole at start and then only what changed (updated_at, which a trigger
// moves on every change) every refreshEvery. A new endpoint or a change
// (a rotation, a disable) is seen within that.
type targets struct {
	db       pgdb.DB
	mu       sync.RWMutex
	byID     map[uuid.UUID]*target
	byTenant map[string][]*target
	// seen is the newest updated_at read; a refresh reads from a little
	// before it, for changes committed out of their timestamps' order.
	seen time.Time
	// asOf is the database's clock when the cache last read: an event
	// that happened after it may have an endpoint made since, unread.
	asOf time.Time
	// fresh serializes the refreshes an event asks for (upTo); synced is
	// when the last of them ran.
	fresh  sync.Mutex
	synced time.Time
}

// refreshEvery is how often the cache reads what changed.
const refreshEvery = time.Second

// refreshOverlap is how far before the newest change seen a refresh reads
// again: a transaction's updated_at is its row's clock_timestamp, and one
// that committed after a later one is still read.
const refreshOverlap = 10 * time.Second

func newTargets(db pgdb.DB) *targets {
	return &targets{db: db, byID: map[uuid.UUID]*target{}, byTenant: map[string][]*target{}}
}

// refresh reads the endpoints changed since the last read (all of them
// the first time).
func (c *targets) refresh(ctx context.Context) error {
	c.mu.RLock()
	since := c.seen
	c.mu.RUnlock()
	// The database's clock comes with the rows (one row of NULLs when no
	// endpoint changed).
	from := time.Time{}
	if !since.IsZero() {
		from = since.Add(-refreshOverlap)
	}
	rows, err := deliverydb.New(c.db).ChangedEndpoints(ctx, from)
	if err != nil {
		return fmt.Errorf("read endpoints: %w", err)
	}
	var got []*target
	newest := since
	read := time.Now()
	var asOf time.Time
	for _, r := range rows {
		asOf = r.AsOf
		if r.ID == nil {
			continue
		}
		t := &target{ID: *r.ID, Tenant: *r.Tenant, URL: *r.Url, Types: r.EventTypes, Enabled: r.Enabled.Bool, Secrets: r.Secrets,
			RotateUntil: r.RotateUntil, MaxInflight: int(*r.MaxInflight), PerSecond: float64(r.MaxPerSecond.Float32),
			FailingSince: r.FailingSince, Read: read}
		if r.UpdatedAt.After(newest) {
			newest = *r.UpdatedAt
		}
		got = append(got, t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range got {
		old := c.byID[t.ID]
		c.byID[t.ID] = t
		list := c.byTenant[t.Tenant]
		if i := slices.Index(list, old); old != nil && i >= 0 {
			list = slices.Clone(list)
			list[i] = t
		} else {
			list = append(slices.Clone(list), t)
		}
		c.byTenant[t.Tenant] = list
	}
	c.seen = newest
	if asOf.After(c.asOf) {
		c.asOf = asOf
	}
	return nil
}

// upTo reads the changes first when the cache may be older than an event
// that happened at `at` (the database's clock): an endpoint made before a
// payment's change gets its notification, however soon after it was made.
// Refreshes asked for together are one.
func (c *targets) upTo(ctx context.Context, at time.Time) error {
	c.mu.RLock()
	ok := !at.After(c.asOf)
	c.mu.RUnlock()
	if ok {
		return nil
	}
	c.fresh.Lock()
	defer c.fresh.Unlock()
	c.mu.RLock()
	ok = !at.After(c.asOf)
	c.mu.RUnlock()
	// An event still ahead of a cache read a moment ago is stamped by a
	// clock ahead of the database's: reading again at once would not help.
	if ok || time.Since(c.synced) < 100*time.Millisecond {
		return nil
	}
	c.synced = time.Now()
	return c.refresh(ctx)
}

// of is tenant's endpoints subscribing to typ, enabled or not (a disabled
// one is owed the event as undelivered).
func (c *targets) of(tenant, typ string) []*target {
	c.mu.RLock()
	list := c.byTenant[tenant]
	c.mu.RUnlock()
	var out []*target
	for _, t := range list {
		if t.wants(typ) {
			out = append(out, t)
		}
	}
	return out
}

// get is endpoint id as last read (nil: unknown).
func (c *targets) get(id uuid.UUID) *target {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.byID[id]
}

// enabled lists the enabled endpoints.
func (c *targets) enabled() []*target {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*target, 0, len(c.byID))
	for _, t := range c.byID {
		if t.Enabled {
			out = append(out, t)
		}
	}
	return out
}

// disabled counts the endpoints disabled.
func (c *targets) disabled() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, t := range c.byID {
		if !t.Enabled {
			n++
		}
	}
	return n
}
