package admin

import (
	"context"
	"time"
)

// ConsoleActions lets the operator console act through this service: its
// requests' moves (RequestActions) and reconciliation runs.
type ConsoleActions struct{ RequestActions }

// NewConsoleActions are the console's actions through s.
func NewConsoleActions(s *Server) ConsoleActions { return ConsoleActions{RequestActions{S: s}} }

// Reconcile starts a run of day in the background (a run can take
// minutes; its row shows it RUNNING meanwhile) and returns at once; one
// already in flight is answered FAILED_PRECONDITION RUN_IN_PROGRESS,
// nothing started (console.Actions).
func (a ConsoleActions) Reconcile(ctx context.Context, operator string, day time.Time) error {
	done, err := a.S.startRun(ctx, day, "admin:console:"+operator)
	if err != nil {
		return err
	}
	go func() {
		if res := <-done; res.Err != nil {
			a.S.log.Error("console reconciliation run", "day", day.Format(time.DateOnly), "err", res.Err)
		}
	}()
	return nil
}
