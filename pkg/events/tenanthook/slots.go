package tenanthook

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/events/tenanthook/deliverydb"
)

// slotLocks holds this process's share of each endpoint's max_inflight
// across the dispatchers: slot i of endpoint e is the session advisory
// lock (hashtext(e), i), on one connection of its own. A dispatcher
// starts an attempt only in a slot it holds, so however many run, no
// endpoint has more than max_inflight attempts from them at once (review
// item 7: counted without a lock, two replicas reached twice the cap). A
// dispatcher that dies loses its session and with it its slots: nothing
// to expire. Two endpoints whose ids hash alike share slots: fewer
// attempts, never more.
type slotLocks struct {
	// connect opens the session the locks live on.
	connect func(context.Context) (*pgx.Conn, error)

	mu   sync.Mutex
	conn *pgx.Conn
	// gen counts sessions: a lane's slots of an earlier session are gone.
	gen int
}

// want is a lane's request for more slots.
type want struct {
	id   uuid.UUID
	max  int
	n    int
	held uint64
}

// acquire asks for slots; it returns the slots taken by endpoint and the
// session they were taken on.
func (s *slotLocks) acquire(ctx context.Context, ws []want) (map[uuid.UUID][]int, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.session(ctx); err != nil {
		return nil, 0, err
	}
	ids, maxes, ns, held := make([]uuid.UUID, len(ws)), make([]int32, len(ws)), make([]int32, len(ws)), make([]int64, len(ws))
	for i, w := range ws {
		ids[i], maxes[i], ns[i], held[i] = w.id, int32(w.max), int32(w.n), int64(w.held)
	}
	rows, err := deliverydb.New(s.conn).AcquireSlots(ctx, deliverydb.AcquireSlotsParams{EndpointIds: ids, Maxes: maxes, Wants: ns, Held: held})
	if err != nil {
		s.drop()
		return nil, 0, fmt.Errorf("take endpoint slots: %w", err)
	}
	out := map[uuid.UUID][]int{}
	for _, r := range rows {
		out[r.EndpointID] = append(out[r.EndpointID], int(r.Slot))
	}
	return out, s.gen, nil
}

// release gives back slots of endpoint id taken on session gen (those of
// an earlier session went with it).
func (s *slotLocks) release(ctx context.Context, id uuid.UUID, slots []int, gen int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || gen != s.gen || len(slots) == 0 {
		return nil
	}
	ss := make([]int32, len(slots))
	for i, v := range slots {
		ss[i] = int32(v)
	}
	if _, err := deliverydb.New(s.conn).ReleaseSlots(ctx, deliverydb.ReleaseSlotsParams{EndpointID: id.String(), Slots: ss}); err != nil {
		s.drop()
		return fmt.Errorf("give back endpoint slots: %w", err)
	}
	return nil
}

// current is the session's generation, -1 when there is none (every slot
// held before is gone).
func (s *slotLocks) current() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return -1
	}
	return s.gen
}

func (s *slotLocks) session(ctx context.Context) error {
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	s.drop()
	conn, err := s.connect(ctx)
	if err != nil {
		return fmt.Errorf("connect for endpoint slots: %w", err)
	}
	s.conn = conn
	s.gen++
	return nil
}

// drop ends the session: its locks are released by the server.
func (s *slotLocks) drop() {
	if s.conn != nil {
		_ = s.conn.Close(context.Background())
		s.conn = nil
	}
}

func (s *slotLocks) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop()
}
