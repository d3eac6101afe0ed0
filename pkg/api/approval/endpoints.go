package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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

const endpointCols = `id, action, endpoint_id, overlap_seconds, since, until, reason, requested_by, requested_name, requested_at, state,
       coalesce(decided_by, ''), coalesce(decided_name, ''), decided_at, expires_at, recovered, coalesce(error, '')`

func scanEndpointRequest(row pgx.Row) (*EndpointRequest, error) {
	var e EndpointRequest
	err := row.Scan(&e.ID, &e.Action, &e.EndpointID, &e.OverlapSeconds, &e.Since, &e.Until, &e.Reason, &e.RequestedBy, &e.RequestedName,
		&e.RequestedAt, &e.State, &e.DecidedBy, &e.DecidedName, &e.DecidedAt, &e.ExpiresAt, &e.Recovered, &e.Error)
	return &e, err
}

// RequestEndpoint records who's action on an endpoint (e.Action,
// EndpointID, OverlapSeconds or Since and Until), awaiting a second
// identity: always, whatever the policy.
func (q *Requests) RequestEndpoint(ctx context.Context, e EndpointRequest, who Identity) (int64, error) {
	if e.Action != Rotate && e.Action != Recover {
		return 0, fmt.Errorf("request endpoint action: unknown action %q", e.Action)
	}
	var id int64
	err := q.db.QueryRow(ctx, `INSERT INTO endpoint_requests (action, endpoint_id, overlap_seconds, since, until, reason, requested_by,
		requested_name, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + $9::interval) RETURNING id`,
		e.Action, e.EndpointID, e.OverlapSeconds, e.Since, e.Until, e.Reason, who.Operator, who.Name, q.policy.Expiry).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("request %s of endpoint %s: %w", e.Action, e.EndpointID, err)
	}
	q.log.Info("approval: endpoint action requested", "id", id, "action", e.Action, "endpoint", e.EndpointID, "operator", who.Name,
		"identity", who.Operator)
	return id, nil
}

// GetEndpoint reads endpoint request id (ErrNotFound).
func (q *Requests) GetEndpoint(ctx context.Context, id int64) (*EndpointRequest, error) {
	return one(q.db.QueryRow(ctx, `SELECT `+endpointCols+` FROM endpoint_requests WHERE id = $1`, id), scanEndpointRequest, "endpoint request", id)
}

// ListEndpoints is the endpoint requests awaiting approval, then the
// latest 50 decided.
func (q *Requests) ListEndpoints(ctx context.Context) ([]*EndpointRequest, error) {
	rows, err := q.db.Query(ctx, `
(SELECT `+endpointCols+` FROM endpoint_requests WHERE state = 'AWAITING_APPROVAL' ORDER BY id LIMIT 200)
UNION ALL
(SELECT `+endpointCols+` FROM endpoint_requests WHERE state <> 'AWAITING_APPROVAL' ORDER BY id DESC LIMIT 50)`)
	return collect(rows, err, scanEndpointRequest, "list endpoint requests")
}

// decideEndpointSQL decides a waiting, unexpired request, never the
// requester's own (a CHECK holds it too).
const decideEndpointSQL = `
UPDATE endpoint_requests SET state = $2, decided_by = $3, decided_name = $4, decided_at = now()
WHERE id = $1 AND state = 'AWAITING_APPROVAL' AND requested_by <> $3 AND expires_at > now()
RETURNING ` + endpointCols

// DecideEndpoint approves (and applies, with apply) or rejects endpoint
// request id as by. The decision is recorded first, so the request is
// applied at most once however many approve it at once; what apply did
// (messages recovered, or its error) is recorded after, and apply's other
// answer (a rotation's new secret) is returned to the approver only,
// never stored.
func (q *Requests) DecideEndpoint(ctx context.Context, id int64, approve bool, by Identity,
	apply func(ctx context.Context, e *EndpointRequest) (int64, string, error)) (*EndpointRequest, string, error) {
	state := "REJECTED"
	if approve {
		state = "APPLIED"
	}
	e, err := scanEndpointRequest(q.db.QueryRow(ctx, decideEndpointSQL, id, state, by.Operator, by.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		got, gerr := q.GetEndpoint(ctx, id)
		if gerr != nil {
			return nil, "", gerr
		}
		return nil, "", undecided(got.RequestedBy, by)
	}
	if err != nil {
		return nil, "", fmt.Errorf("decide endpoint request %d: %w", id, err)
	}
	q.log.Info("approval: endpoint request decided", "id", id, "state", state, "operator", by.Name, "identity", by.Operator)
	if !approve {
		return e, "", nil
	}
	n, secret, aerr := apply(ctx, e)
	if aerr != nil {
		e.State, e.Error = "NOT_APPLIED", aerr.Error()
		_, err = q.db.Exec(ctx, `UPDATE endpoint_requests SET state = 'NOT_APPLIED', error = $2 WHERE id = $1`, id, e.Error)
	} else if e.Action == Recover {
		e.Recovered = &n
		_, err = q.db.Exec(ctx, `UPDATE endpoint_requests SET recovered = $2 WHERE id = $1`, id, n)
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
	rows, err := q.db.Query(ctx, `SELECT `+endpointCols+` FROM endpoint_requests WHERE endpoint_id = $1 ORDER BY id DESC LIMIT 20`, id)
	return collect(rows, err, scanEndpointRequest, "endpoint requests of "+id.String())
}
