package sweeper

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/paysched/paysched/pkg/engine/sweeper/sweeperdb"
)

// Heartbeat is what a sweeper reports about itself.
type Heartbeat struct {
	BreakerOpen bool                `json:"breakerOpen"`
	Executors   []ExecutorHeartbeat `json:"executors"`
}

// ExecutorHeartbeat is one executor as this sweeper sees it.
type ExecutorHeartbeat struct {
	Addr     string `json:"addr"`
	Admitted bool   `json:"admitted"`
	Free     int64  `json:"free"`
	Streams  int32  `json:"streams"`
}

func (s *Sweeper) heartbeat() Heartbeat {
	h := Heartbeat{BreakerOpen: s.cfg.Breaker != nil && s.cfg.Breaker.Open()}
	s.mu.Lock()
	for _, e := range s.execs {
		h.Executors = append(h.Executors, ExecutorHeartbeat{Addr: e.addr, Admitted: e.admitted.Load(),
			Free: e.free.Load(), Streams: e.streams.Load()})
	}
	s.mu.Unlock()
	sort.Slice(h.Executors, func(i, j int) bool { return h.Executors[i].Addr < h.Executors[j].Addr })
	return h
}

// report writes the heartbeat every interval until ctx ends, and a
// breaker change whenever it sees one. A failed write is logged and
// retried next time: the console's view is best effort, the sweep is not.
func (s *Sweeper) report(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	wasOpen := false
	for {
		h := s.heartbeat()
		if err := s.writeHeartbeat(ctx, h, h.BreakerOpen != wasOpen); err != nil && ctx.Err() == nil {
			s.log.Warn("heartbeat", "err", err)
		} else {
			wasOpen = h.BreakerOpen
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Sweeper) writeHeartbeat(ctx context.Context, h Heartbeat, changed bool) error {
	b, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode heartbeat: %w", err)
	}
	// What this sweeper last saw, for the console's overview; a breaker
	// change for its gateway page (sweeperdb/heartbeats.sql).
	q := sweeperdb.New(s.db)
	if err := q.Heartbeat(ctx, sweeperdb.HeartbeatParams{Process: s.cfg.ID, Info: b}); err != nil {
		return fmt.Errorf("write heartbeat: %w", err)
	}
	if changed {
		if err := q.BreakerChange(ctx, sweeperdb.BreakerChangeParams{Process: s.cfg.ID, Open: h.BreakerOpen}); err != nil {
			return fmt.Errorf("note breaker change: %w", err)
		}
	}
	return nil
}
