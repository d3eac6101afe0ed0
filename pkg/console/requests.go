package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/status"

	"github.com/paysched/paysched/pkg/api/approval"
	"github.com/paysched/paysched/pkg/console/consoledb"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// maxBulk is the most payments one request acts on.
const maxBulk = approval.MaxBulk

// Request is an operator's request (package approval): the console shows
// them and makes them, admin-api's runner applies them.
type Request = approval.Request

// Selection and Amounts are what an action would act on (package
// approval).
type (
	Selection = approval.Selection
	Amounts   = approval.Amounts
)

// actions are the dead-letter actions, by name, and openActions those on
// a PENDING or a HELD payment; actionFrom is the status each acts on.
var (
	actions     = map[string]string{"REDRIVE": "re-drive", "RESOLVE": "resolve as failed", "CANCEL": "cancel"}
	openActions = map[payment.Status]map[string]string{
		payment.Pending: {"HOLD": "hold (the sweepers skip it)", "CANCEL_PENDING": "cancel",
			"RESCHEDULE": "reschedule (runs at the time given, never before its due time)",
			"RUN_NOW":    "run now (a payment past its due time, waiting on a backoff or a reschedule)"},
		payment.Held: {"RELEASE": "release (back to PENDING)", "CANCEL_HELD": "cancel"},
	}
	actionFrom = map[string]payment.Status{"REDRIVE": payment.DeadLettered, "RESOLVE": payment.DeadLettered,
		"CANCEL": payment.DeadLettered, "HOLD": payment.Pending, "CANCEL_PENDING": payment.Pending,
		"RELEASE": payment.Held, "CANCEL_HELD": payment.Held, "RESCHEDULE": payment.Pending, "RUN_NOW": payment.Pending}
)

// actionName is how an action reads.
func actionName(a string) string {
	if n, ok := actions[a]; ok {
		return n
	}
	return openActions[actionFrom[a]][a]
}

// selectOpen pins the ticked payments that are in status from.
func selectOpen(ctx context.Context, db pgdb.DB, ids []uuid.UUID, from payment.Status) (Selection, error) {
	q := consoledb.New(db)
	dues, err := q.DuesOf(ctx, ids)
	if err != nil {
		return Selection{}, fmt.Errorf("select %s payments: %w", from, err)
	}
	lo, hi := span(dues)
	rows, err := q.OpenSelection(ctx, consoledb.OpenSelectionParams{Ids: ids, Status: string(from), Dues: dues,
		Lo: lo, Hi: hi, Max: maxBulk + 1})
	if err != nil {
		return Selection{}, fmt.Errorf("select %s payments: %w", from, err)
	}
	return collectSelection(rows), nil
}

func selectDead(ctx context.Context, db pgdb.DB, ids []uuid.UUID, reason string) (Selection, error) {
	q := consoledb.New(db)
	var dues []time.Time
	if ids != nil {
		ds, err := q.DuesOf(ctx, ids)
		if err != nil {
			return Selection{}, fmt.Errorf("select dead letters: %w", err)
		}
		dues = ds
	}
	// Without ids, both are NULL: the dead letters of the reason.
	rows, err := q.DeadSelection(ctx, consoledb.DeadSelectionParams{Ids: ids, Dues: dues, Reason: reason, Max: maxBulk + 1})
	if err != nil {
		return Selection{}, fmt.Errorf("select dead letters: %w", err)
	}
	return collectSelection(rows), nil
}

// selectionRow is a row of OpenSelection and DeadSelection.
type selectionRow = struct {
	ID          uuid.UUID
	AmountMinor int64
	Currency    string
	Attempt     int32
}

// collectSelection is the selection of rows, at most maxBulk of them
// (Capped when there were more).
func collectSelection[R ~selectionRow](rows []R) Selection {
	s := Selection{Amounts: map[string]*Amounts{}}
	for _, r := range rows {
		x := selectionRow(r)
		if len(s.IDs) == maxBulk {
			s.Capped = true
			break
		}
		s.Add(x.ID, x.Attempt, x.AmountMinor, x.Currency)
	}
	return s
}

// needsApproval is whether action on s would wait for a second operator,
// with the operator's running totals r (the policy's word).
func (c *Console) needsApproval(action string, s Selection, r approval.Running) bool {
	p := c.requests.Policy()
	return p.Needs(action, s, r)
}

// createRequest records who's action on s (approval.Requests.Create).
func (c *Console) createRequest(ctx context.Context, action, filter, reason string, runAt *time.Time, who login.Identity, s Selection) (int64, bool, error) {
	return c.requests.Create(ctx, approval.NewRequest{Action: action, Filter: filter, Reason: reason, RunAt: runAt,
		Who: approval.Identity(who), Sel: s, Via: "console"})
}

var errNotFound = approval.ErrNotFound

func (c *Console) request(ctx context.Context, id int64) (*Request, error) {
	return c.requests.Get(ctx, id)
}

func (c *Console) listRequests(ctx context.Context) ([]*Request, error) { return c.requests.List(ctx) }

func (c *Console) decideRequest(ctx context.Context, id int64, approve bool, by login.Identity) error {
	return c.requests.Decide(ctx, id, approve, approval.Identity(by))
}

// actionError is a refusal as an operator reads it: the admin service's
// message.
func actionError(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return strings.TrimSpace(err.Error())
}
