package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/api/approval/approvaldb"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// Endpoint actions: a webhook endpoint's secret rotated, its failed
// messages recovered.
const (
	Rotate  = "ROTATE"
	Recover = "RECOVER"
)

// EndpointRequest is an operator's rotation of a webhook endpoint's
// secret, or recovery of its failed messages: applied only by a second
// identity's approval (a rotated secret signs events the tenant trusts).
type EndpointRequest struct {
	ID             int64
	Action         string
	EndpointID     uuid.UUID
	OverlapSeconds int64
	Since, Until   *time.Time
	Reason         string
	RequestedBy    string
	RequestedName  string
	RequestedAt    time.Time
	State          string
	DecidedBy      string
	DecidedName    string
	DecidedAt      *time.Time
	ExpiresAt      time.Time
	Recovered      *int64
	Error          string
}

func fromEndpointRow(row approvaldb.EndpointRequest) (*EndpointRequest, error) {
	return &EndpointRequest{ID: row.ID, Action: row.Action, EndpointID: row.EndpointID, OverlapSeconds: row.OverlapSeconds,
		Since: row.Since, Until: row.Until, Reason: row.Reason, RequestedBy: row.RequestedBy, RequestedName: row.RequestedName,
		RequestedAt: row.RequestedAt, State: row.State, DecidedBy: or(row.DecidedBy, ""), DecidedName: or(row.DecidedName, ""),
		DecidedAt: row.DecidedAt, ExpiresAt: row.ExpiresAt, Recovered: row.Recovered, Error: or(row.Error, "")}, nil
}

// RequestEndpoint records who's action on an endpoint (e.Action,
// EndpointID, OverlapSeconds or Since and Until), awaiting a second
// identity: always, whatever the policy.
func (q *Requests) RequestEndpoint(ctx context.Context, e EndpointRequest, who Identity) (int64, error) {
	if e.Action != Rotate && e.Action != Recover {
		return 0, fmt.Errorf("request endpoint action: unknown action %q", e.Action)
	}
	id, err := approvaldb.New(q.db).CreateEndpointRequest(ctx, approvaldb.CreateEndpointRequestParams{Action: e.Action,
		EndpointID: e.EndpointID, OverlapSeconds: e.OverlapSeconds, Since: e.Since, Until: e.Until, Reason: e.Reason,
		RequestedBy: who.Operator, RequestedName: who.Name, Expiry: q.policy.Expiry})
	if err != nil {
		return 0, fmt.Errorf("request %s of endpoint %s: %w", e.Action, e.EndpointID, err)
	}
	q.log.Info("approval: endpoint action requested", "id", id, "action", e.Action, "endpoint", e.EndpointID, "operator", who.Name,
		"identity", who.Operator)
	return id, nil
}

// GetEndpoint reads endpoint request id (ErrNotFound).
func (q *Requests) GetEndpoint(ctx context.Context, id int64) (*EndpointRequest, error) {
	row, err := approvaldb.New(q.db).GetEndpointRequest(ctx, id)
	return one(row, err, fromEndpointRow, "endpoint request", id)
}

// ListEndpoints is the endpoint requests awaiting approval, then the
// latest 50 decided.
func (q *Requests) ListEndpoints(ctx context.Context) ([]*EndpointRequest, error) {
	db := approvaldb.New(q.db)
	return both(ctx, db.OpenEndpointRequests, db.ClosedEndpointRequests, fromEndpointRow, "list endpoint requests")
}

// DecideEndpoint approves (and applies, with apply) or rejects endpoint
// request id as by. The decision is recorded first, so the request is
// applied at most once however many approve it at once; what apply did
// (messages recovered, or its error) is recorded after, and apply's other
// answer (a rotation's new secret) is returned to the approver only,
// never stored.
func (q *Requests) DecideEndpoint(ctx context.Context, id int64, approve bool, by Identity,
	apply func(ctx context.Context, e *EndpointRequest) (int64, string, error)) (*EndpointRequest, string, error) {
	state := decision(approve, "APPLIED")
	// A waiting, unexpired request, never the requester's own (a CHECK
	// holds it too).
	db := approvaldb.New(q.db)
	row, err := db.DecideEndpointRequest(ctx, approvaldb.DecideEndpointRequestParams{ID: id, State: state, DecidedBy: by.Operator, DecidedName: by.Name})
	if err := decided(ctx, q.log, err, by, "endpoint request", id, state, q.GetEndpoint); err != nil {
		return nil, "", err
	}
	e, _ := fromEndpointRow(row)
	if !approve {
		return e, "", nil
	}
	n, secret, aerr := apply(ctx, e)
	if aerr != nil {
		e.State, e.Error = "NOT_APPLIED", aerr.Error()
		err = db.EndpointRequestNotApplied(ctx, approvaldb.EndpointRequestNotAppliedParams{ID: id, Error: e.Error})
	} else if e.Action == Recover {
		e.Recovered = &n
		err = db.EndpointRequestRecovered(ctx, approvaldb.EndpointRequestRecoveredParams{ID: id, Recovered: n})
	}
	if err != nil {
		return e, secret, fmt.Errorf("record endpoint request %d: %w", id, err)
	}
	return e, secret, aerr
}

// ApplyEndpoint is DecideEndpoint's apply for the webhooks' database
// hooks: a rotation makes the new secret (overlap 0: 24 hours), a recovery
// makes the failed messages due again.
func ApplyEndpoint(hooks pgdb.DB) func(ctx context.Context, e *EndpointRequest) (int64, string, error) {
	return func(ctx context.Context, e *EndpointRequest) (int64, string, error) {
		if e.Action == Rotate {
			overlap := time.Duration(e.OverlapSeconds) * time.Second
			if overlap == 0 {
				overlap = 24 * time.Hour
			}
			secret, err := tenanthook.RotateSecret(ctx, hooks, "", e.EndpointID, overlap)
			return 0, secret, err
		}
		if e.Since == nil {
			return 0, "", errors.New("a recovery without its since")
		}
		n, err := tenanthook.Recover(ctx, hooks, "", e.EndpointID, *e.Since, e.Until)
		return n, "", err
	}
}

// EndpointRequestsOf is endpoint id's latest 20 requests, newest first.
func (q *Requests) EndpointRequestsOf(ctx context.Context, id uuid.UUID) ([]*EndpointRequest, error) {
	rows, err := approvaldb.New(q.db).EndpointRequestsOf(ctx, id)
	return all(rows, err, fromEndpointRow, "endpoint requests of "+id.String())
}
