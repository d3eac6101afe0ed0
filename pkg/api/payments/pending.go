package payments

import (
	"context"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/store"
)

// ReasonTooManyPending means the actor already has as many payments scheduled
// and not yet due as --max-pending allows.
const ReasonTooManyPending = "TOO_MANY_PENDING"

// DefaultMaxPending is --max-pending's default: room for a large payroll
// or billing run scheduled ahead, and a bound on what one tenant can pile
// into the schedule that every due-time spike must sweep.
const DefaultMaxPending = 1_000_000

// pendingRecount is how long a count of an actor's scheduled payments is
// trusted (creates since are added to it): the count reads up to the cap's
// worth of index entries, so not on every create.
const pendingRecount = 10 * time.Second

// maxPendingEntries bounds the actors whose counts are kept.
const maxPendingEntries = 100_000

// pendingCap refuses a create that would take an actor past its cap of
// payments scheduled and not yet due. Per replica and up to pendingRecount
// stale: a bound on a runaway client, not an exact quota.
type pendingCap struct {
	cap   int
	count func(ctx context.Context, payer string, limit int) (int, error)
	now   func() time.Time

	mu      sync.Mutex
	entries map[string]pendingEntry
}

type pendingEntry struct {
	n  int
	at time.Time
}

func newPendingCap(limit int, st *store.Store, now func() time.Time) *pendingCap {
	if limit <= 0 {
		return nil
	}
	return &pendingCap{cap: limit, count: st.Scheduled, now: now, entries: map[string]pendingEntry{}}
}

// admit says whether payer may schedule n more, and counts them if so.
func (p *pendingCap) admit(ctx context.Context, payer string, n int) error {
	if p == nil || n == 0 {
		return nil
	}
	now := p.now()
	p.mu.Lock()
	e, ok := p.entries[payer]
	p.mu.Unlock()
	if !ok || now.Sub(e.at) > pendingRecount {
		c, err := p.count(ctx, payer, p.cap+1)
		if err != nil {
			return err
		}
		e = pendingEntry{n: c, at: now}
	}
	if e.n+n > p.cap {
		return tooManyPending(p.cap)
	}
	e.n += n
	p.mu.Lock()
	if len(p.entries) >= maxPendingEntries {
		clear(p.entries)
	}
	p.entries[payer] = e
	p.mu.Unlock()
	return nil
}

func tooManyPending(limit int) error {
	st := status.Newf(codes.ResourceExhausted, "this actor already has %d payments scheduled and not yet due, the most allowed: wait until some fall due, or cancel some", limit)
	d, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: ReasonTooManyPending, Domain: apierr.Domain, Metadata: map[string]string{"maxPending": strconv.Itoa(limit)}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(pendingRecount)},
	)
	if err != nil {
		return st.Err()
	}
	return d.Err()
}
