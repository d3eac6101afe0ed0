package tenanthook

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/paysched/paysched/pkg/events/tenanthook/deliverydb"
	"github.com/paysched/paysched/pkg/events/tenanthook/endpointdb"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// Endpoint is a tenant's webhook endpoint.
type Endpoint struct {
	ID             uuid.UUID
	Tenant         string
	URL            string
	EventTypes     []string // empty: every type
	Description    string
	Enabled        bool
	MaxInflight    int
	MaxPerSecond   float64
	DisabledReason string
	FailingSince   *time.Time
	RotateUntil    *time.Time
	CreatedAt      time.Time
}

// ErrNotFound means no such endpoint (of that tenant), or no such delivery.
var ErrNotFound = errors.New("not found")

// ErrInvalid wraps a client's mistake in an endpoint's fields.
var ErrInvalid = errors.New("invalid endpoint")

// ErrTooManyEndpoints means the tenant already has MaxEndpointsPerTenant
// endpoints; nothing was created.
var ErrTooManyEndpoints = errors.New("too many endpoints")

// MaxEndpointsPerTenant bounds a tenant's endpoints, enabled or not: every
// event of the tenant is fanned out to each, and each takes dispatcher
// slots, so one tenant's hundreds would slow every tenant's deliveries.
const MaxEndpointsPerTenant = 16

// The limits of an endpoint created without its own (0 in Check).
const (
	defaultMaxInflight  = 4
	defaultMaxPerSecond = 50
)

// eventType is the spec's advice for a type: full-stop separated
// identifiers.
var eventType = regexp.MustCompile(`^[a-zA-Z0-9_]+(\.[a-zA-Z0-9_]+)*$`)

// Check says what is wrong with e for a new endpoint or an update.
// loopback allows a local receiver (development).
func (e Endpoint) Check(loopback bool) error {
	if err := CheckURL(e.URL, loopback); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(e.EventTypes) > 32 {
		return fmt.Errorf("%w: more than 32 event types", ErrInvalid)
	}
	for _, t := range e.EventTypes {
		if len(t) > 128 || !eventType.MatchString(t) {
			return fmt.Errorf("%w: event type %q: want dot-separated [a-zA-Z0-9_] words, such as paysched.payment.completed", ErrInvalid, t)
		}
	}
	if len(e.Description) > 500 {
		return fmt.Errorf("%w: description longer than 500 characters", ErrInvalid)
	}
	if e.MaxInflight < 0 || e.MaxInflight > 64 {
		return fmt.Errorf("%w: max in flight %d: want 1 to 64 (0: %d)", ErrInvalid, e.MaxInflight, defaultMaxInflight)
	}
	// Under 1 a second, each attempt holds a dispatcher's slot while it
	// waits its turn (pace): a tenant could park the slots. Written so
	// that NaN, which every comparison fails, is refused too.
	if e.MaxPerSecond != 0 && !(e.MaxPerSecond >= 1 && e.MaxPerSecond <= 10000) {
		return fmt.Errorf("%w: max per second %g: want 1 to 10,000 (0: %d)", ErrInvalid, e.MaxPerSecond, defaultMaxPerSecond)
	}
	return nil
}

// endpointOf is an endpoint as its reads return it (never its secrets).
// The create's and the list's rows have the same columns: callers convert
// them to GetEndpointRow.
func endpointOf(r endpointdb.GetEndpointRow) Endpoint {
	return Endpoint{ID: r.ID, Tenant: r.Tenant, URL: r.Url, EventTypes: r.EventTypes, Description: r.Description, Enabled: r.Enabled,
		MaxInflight: int(r.MaxInflight), MaxPerSecond: float64(r.MaxPerSecond), DisabledReason: r.DisabledReason,
		FailingSince: r.FailingSince, RotateUntil: r.RotateUntil, CreatedAt: r.CreatedAt}
}

// CreateEndpoint adds e (checked by the caller) with a fresh signing
// secret, which it returns: shown once, to its tenant. A tenant that has
// MaxEndpointsPerTenant endpoints already gets ErrTooManyEndpoints.
func CreateEndpoint(ctx context.Context, db pgdb.DB, e Endpoint) (Endpoint, string, error) {
	e.ID = uuid.New()
	if e.MaxInflight == 0 {
		e.MaxInflight = defaultMaxInflight
	}
	if e.MaxPerSecond == 0 {
		e.MaxPerSecond = defaultMaxPerSecond
	}
	if e.EventTypes == nil {
		e.EventTypes = []string{}
	}
	secret := NewSymmetricSecret()
	var out Endpoint
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Creates of one tenant take turns, so two sent at 15 endpoints
		// cannot both count 15. The lock is a statement of its own: the
		// count's starts after it is granted and (read committed) sees
		// every endpoint committed before. Two tenants whose names hash
		// alike only take turns too; an int4 key never meets the
		// migrations' 7_202_611_30x locks.
		q := endpointdb.New(tx)
		if err := q.LockTenantEndpoints(ctx, e.Tenant); err != nil {
			return err
		}
		rows, err := q.CreateEndpoint(ctx, endpointdb.CreateEndpointParams{ID: e.ID, Tenant: e.Tenant, Url: e.URL, EventTypes: e.EventTypes,
			Description: e.Description, MaxInflight: int32(e.MaxInflight), MaxPerSecond: float32(e.MaxPerSecond), Secret: secret,
			Max: MaxEndpointsPerTenant})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return fmt.Errorf("tenant %q has %d endpoints, the most allowed: %w", e.Tenant, MaxEndpointsPerTenant, ErrTooManyEndpoints)
		}
		out = endpointOf(endpointdb.GetEndpointRow(rows[0]))
		return nil
	})
	if err != nil {
		return Endpoint{}, "", fmt.Errorf("create endpoint: %w", err)
	}
	return out, secret, nil
}

// ListEndpoints is a tenant's endpoints ("" : every tenant's), at most 500.
func ListEndpoints(ctx context.Context, db pgdb.DB, tenant string) ([]Endpoint, error) {
	rows, err := endpointdb.New(db).ListEndpoints(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	out := make([]Endpoint, len(rows))
	for i, r := range rows {
		out[i] = endpointOf(endpointdb.GetEndpointRow(r))
	}
	return out, nil
}

// GetEndpoint reads one endpoint (ErrNotFound when there is none).
func GetEndpoint(ctx context.Context, db pgdb.DB, id uuid.UUID) (Endpoint, error) {
	rows, err := endpointdb.New(db).GetEndpoint(ctx, id)
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint: %w", err)
	}
	if len(rows) == 0 {
		return Endpoint{}, fmt.Errorf("endpoint %s: %w", id, ErrNotFound)
	}
	return endpointOf(rows[0]), nil
}

// SetEnabled enables or disables endpoint id of tenant ("": any tenant):
// enabling clears the failure clock and the reason it was disabled.
func SetEnabled(ctx context.Context, db pgdb.DB, tenant string, id uuid.UUID, enabled bool) error {
	n, err := endpointdb.New(db).SetEnabled(ctx, endpointdb.SetEnabledParams{ID: id, Tenant: tenant, Enabled: enabled})
	if err != nil {
		return fmt.Errorf("set endpoint enabled: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("endpoint %s: %w", id, ErrNotFound)
	}
	return nil
}

// RotateSecret gives endpoint id a new secret, returned, and keeps its
// current one signing beside it for overlap: every delivery carries both
// signatures until then, so a receiver switches keys with no failed
// delivery.
func RotateSecret(ctx context.Context, db pgdb.DB, tenant string, id uuid.UUID, overlap time.Duration) (string, error) {
	if overlap < 0 || overlap > 7*24*time.Hour {
		return "", fmt.Errorf("%w: overlap %s: want up to 7 days", ErrInvalid, overlap)
	}
	secret := NewSymmetricSecret()
	// The owner's function: the caller need not read the secrets
	// (0023_webhooks.sql).
	found, err := endpointdb.New(db).RotateSecret(ctx, endpointdb.RotateSecretParams{ID: id, Tenant: tenant, Secret: secret, Overlap: overlap})
	if err != nil {
		return "", fmt.Errorf("rotate secret: %w", err)
	}
	if !found {
		return "", fmt.Errorf("endpoint %s: %w", id, ErrNotFound)
	}
	return secret, nil
}

// Resend makes the message msgID to endpoint id due again now, whatever
// became of it (a delivered one is delivered again, with the same
// webhook-id). It returns false when the endpoint never had the message.
func Resend(ctx context.Context, db pgdb.DB, tenant string, id uuid.UUID, msgID string) error {
	n, err := deliverydb.New(db).Resend(ctx, deliverydb.ResendParams{EndpointID: id, MsgID: msgID, Tenant: tenant})
	if err != nil {
		return fmt.Errorf("resend: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("message %s to endpoint %s (or it is being attempted now): %w", msgID, id, ErrNotFound)
	}
	return nil
}

// MaxRecover bounds one recover: a larger one is repeated with a later
// since.
const MaxRecover = 10000

// Recover makes every Undelivered delivery to endpoint id noted at or after
// since (and before until, when set) due again now, up to MaxRecover of
// them, oldest first; it returns how many.
func Recover(ctx context.Context, db pgdb.DB, tenant string, id uuid.UUID, since time.Time, until *time.Time) (int64, error) {
	if until != nil && !until.After(since) {
		return 0, fmt.Errorf("%w: until %s is not after since %s", ErrInvalid, until.Format(time.RFC3339), since.Format(time.RFC3339))
	}
	exists, err := endpointdb.New(db).EndpointExists(ctx, endpointdb.EndpointExistsParams{ID: id, Tenant: tenant})
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	if !exists {
		return 0, fmt.Errorf("endpoint %s: %w", id, ErrNotFound)
	}
	n, err := deliverydb.New(db).Recover(ctx, deliverydb.RecoverParams{EndpointID: id, Since: since, Until: until, MaxRows: MaxRecover})
	if err != nil {
		return 0, fmt.Errorf("recover: %w", err)
	}
	return n, nil
}

// DeliveryAttempt is one recorded attempt of a delivery.
type DeliveryAttempt struct {
	Delivery  int64
	Endpoint  uuid.UUID
	URL       string
	MsgID     string
	Type      string
	N         int
	At        time.Time
	Status    *int
	LatencyMs int
	Error     string
	Response  string
	State     string
}

// Attempts is the delivery log: the attempts of a payment's deliveries
// (payment set) or of an endpoint's (newest first, at most limit), to the
// endpoints of tenant ("": any tenant's).
func Attempts(ctx context.Context, db pgdb.DB, tenant string, payment *uuid.UUID, endpoint *uuid.UUID, limit int) ([]DeliveryAttempt, error) {
	rows, err := deliverydb.New(db).DeliveryLog(ctx, deliverydb.DeliveryLogParams{PaymentID: payment, EndpointID: endpoint,
		Tenant: tenant, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("delivery log: %w", err)
	}
	out := make([]DeliveryAttempt, len(rows))
	for i, r := range rows {
		out[i] = DeliveryAttempt{Delivery: r.DeliveryID, Endpoint: r.EndpointID, URL: r.Url, MsgID: r.MsgID, Type: r.EventType,
			N: int(r.Attempt), At: r.At, LatencyMs: int(r.LatencyMs), Error: r.Error, Response: r.Response, State: r.State}
		if r.Status != nil {
			st := int(*r.Status)
			out[i].Status = &st
		}
	}
	return out, nil
}
