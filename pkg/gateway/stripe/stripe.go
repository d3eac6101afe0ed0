// Package stripeadapter is the gateway port (gateway.Gateway) over Stripe's
// API, with stripe-go: a charge is a PaymentIntent created and confirmed
// off-session under Idempotency-Key = the paymentId, found again by
// listing the customer's PaymentIntents (or, without a payer, by Search)
// on its metadata, and settled through the balance transactions. Every
// answer is a gRPC status error with the port's meaning; docs/GATEWAYS.md
// has the mapping and why.
package stripeadapter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	"github.com/paysched/paysched/pkg/gateway"
)

// Metadata keys the adapter writes on every PaymentIntent.
const (
	// MetaPaymentID carries the paymentId: GetCharge searches on it and
	// settlements are mapped back to payments through it.
	MetaPaymentID = "paysched_payment_id"
	// MetaPayee carries the payee as the engine named it.
	MetaPayee = "paysched_payee"
)

// DefaultURL is Stripe's API.
const DefaultURL = "https://api.stripe.com"

// Config configures an Adapter.
type Config struct {
	// APIKey is the secret key (sk_...). It is sent in the Authorization
	// header only, and scrubbed from every error.
	APIKey string
	// URL is the API base URL; empty: DefaultURL. stripe-mock's for tests
	// and local runs.
	URL string
	// HTTPClient carries the requests; nil: one with a 30 s timeout, a
	// backstop behind the callers' deadlines.
	HTTPClient *http.Client
	// CustomerTTL is how long a payer's default payment method is cached;
	// 0: 5 minutes.
	CustomerTTL time.Duration
}

// Adapter is a gateway.Gateway over Stripe.
type Adapter struct {
	sc  *stripe.Client
	api stripe.Backend // for the list call whose has_more the iterators hide
	key *secret        // a pointer: fmt prints an unexported field's string raw, a pointer's address

	ttl       time.Duration
	mu        sync.Mutex
	customers map[string]cachedCustomer
	now       func() time.Time
}

type cachedCustomer struct {
	pm      string // default payment method; empty: none
	expires time.Time
}

// maxCachedCustomers bounds the cache; past it the cache starts afresh,
// which costs one customer read per payer.
const maxCachedCustomers = 10000

// secret holds the API key out of fmt output, should an Adapter (or the
// secret) be printed.
type secret struct{ key string }

func (*secret) String() string   { return "[redacted]" }
func (*secret) GoString() string { return "[redacted]" }

// New returns an Adapter.
func New(cfg Config) (*Adapter, error) {
	if cfg.APIKey == "" {
		return nil, errors.New("stripe: no API key")
	}
	url := cfg.URL
	if url == "" {
		url = DefaultURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	ttl := cfg.CustomerTTL
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	api := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		HTTPClient: hc,
		URL:        stripe.String(url),
		// No retries inside stripe-go: the engine retries with the same
		// key, after asking first when the answer was lost, and within its
		// own deadlines; stripe-go's retries would spend those deadlines
		// and blur a lost answer into a late one.
		MaxNetworkRetries: stripe.Int64(0),
		// Errors are ours to report (scrubbed, with context); stripe-go's
		// own log lines would go to stderr unstructured.
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	backends := &stripe.Backends{API: api, Connect: api, Uploads: api, MeterEvents: api}
	return &Adapter{
		sc:        stripe.NewClient(cfg.APIKey, stripe.WithBackends(backends)),
		api:       api,
		key:       &secret{cfg.APIKey},
		ttl:       ttl,
		customers: map[string]cachedCustomer{},
		now:       time.Now,
	}, nil
}

// Close implements dial.Gateway; the HTTP client needs no closing.
func (a *Adapter) Close() {}

// Clock implements gateway.Clocked: the Date header of a one-item listing
// of PaymentIntents (a call every key the adapter works with may make).
func (a *Adapter) Clock(ctx context.Context) (time.Time, error) {
	p := &stripe.PaymentIntentListParams{}
	p.Context = ctx
	p.Limit = stripe.Int64(1)
	q := &form.Values{}
	form.AppendTo(q, p)
	list := &stripe.PaymentIntentList{}
	if err := a.api.CallRaw(http.MethodGet, "/v1/payment_intents", a.key.key, []byte(q.Encode()), p.GetParams(), list); err != nil {
		return time.Time{}, a.toStatus("ask Stripe its clock", err)
	}
	if list.LastResponse == nil || list.LastResponse.Header.Get("Date") == "" {
		return time.Time{}, errors.New("stripe: the answer carries no Date header")
	}
	return gateway.ParseDate(list.LastResponse.Header.Get("Date"))
}

// Charge implements gateway.Gateway: it creates and confirms, in one
// request, an off-session PaymentIntent under Idempotency-Key = the key.
func (a *Adapter) Charge(ctx context.Context, req *gatewayv1.ChargeRequest) (*gatewayv1.Charge, error) {
	key := req.GetIdempotencyKey()
	cus, pm, ok := parsePayer(req.GetPayer())
	if !ok {
		// Never sent: no Stripe customer can pay it, and no retry changes
		// the payer, so it is a definitive refusal rather than an error.
		return declinedLocally(req, "invalid_payer: payer "+quote(req.GetPayer())+" is not a Stripe customer id (cus_... or cus_.../pm_...)"), nil
	}
	if pm == "" {
		var reason string
		var err error
		pm, reason, err = a.defaultPaymentMethod(ctx, cus)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			return a.declineUnlessCharged(ctx, req, cus, reason)
		}
	}
	p := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(req.GetAmount()),
		Currency:      stripe.String(strings.ToLower(req.GetCurrency())),
		Customer:      stripe.String(cus),
		PaymentMethod: stripe.String(pm),
		Confirm:       stripe.Bool(true),
		OffSession:    stripe.Bool(true),
		// Off-session there is nobody to redirect: a method that would need
		// it fails now rather than wanting a return_url.
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true), AllowRedirects: stripe.String("never"),
		},
	}
	p.SetIdempotencyKey(key)
	p.AddMetadata(MetaPaymentID, key)
	if payee := req.GetPayee(); payee != "" {
		p.AddMetadata(MetaPayee, payee)
		if strings.HasPrefix(payee, "acct_") {
			p.TransferData = &stripe.PaymentIntentCreateTransferDataParams{Destination: stripe.String(payee)}
		}
	}
	pi, err := a.sc.V1PaymentIntents.Create(ctx, p)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && isDecline(se) {
			return declined(req, se), nil
		}
		return nil, a.toStatus("create payment intent", err)
	}
	return toCharge(pi), nil
}

// parsePayer splits "cus_X" or "cus_X/pm_Y".
func parsePayer(payer string) (cus, pm string, ok bool) {
	cus, pm, _ = strings.Cut(payer, "/")
	if !strings.HasPrefix(cus, "cus_") || len(cus) == len("cus_") {
		return "", "", false
	}
	if pm != "" && (!strings.HasPrefix(pm, "pm_") || len(pm) == len("pm_")) {
		return "", "", false
	}
	return cus, pm, true
}

// defaultPaymentMethod returns the customer's
// invoice_settings.default_payment_method, or a decline reason when the
// customer cannot pay (missing, deleted, no default method). Errors are
// not-charged ones: nothing was sent to charge yet.
func (a *Adapter) defaultPaymentMethod(ctx context.Context, cus string) (pm, reason string, err error) {
	a.mu.Lock()
	c, ok := a.customers[cus]
	a.mu.Unlock()
	if ok && a.now().Before(c.expires) {
		if c.pm == "" {
			return "", "no_payment_method: customer " + cus + " has no default payment method", nil
		}
		return c.pm, "", nil
	}
	got, err := a.sc.V1Customers.Retrieve(ctx, cus, nil)
	if err != nil {
		var se *stripe.Error
		if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
			return "", "no_such_customer: " + a.scrub(se.Msg), nil
		}
		st := status.Convert(a.toStatus("retrieve customer "+cus, err))
		switch st.Code() {
		case codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted:
			return "", "", st.Err()
		}
		// Only a read failed: nothing was charged, so it must not read as
		// "may have charged". RESOURCE_EXHAUSTED is the port's "not
		// charged, Stripe unhealthy, retry later".
		return "", "", gateway.RateLimited("stripe: nothing charged: %s", st.Message())
	}
	if got.Deleted {
		return "", "no_such_customer: customer " + cus + " is deleted", nil
	}
	if d := got.InvoiceSettings; d != nil && d.DefaultPaymentMethod != nil {
		pm = d.DefaultPaymentMethod.ID
	}
	a.mu.Lock()
	if len(a.customers) >= maxCachedCustomers {
		a.customers = map[string]cachedCustomer{}
	}
	a.customers[cus] = cachedCustomer{pm: pm, expires: a.now().Add(a.ttl)}
	a.mu.Unlock()
	if pm == "" {
		return "", "no_payment_method: customer " + cus + " has no default payment method", nil
	}
	return pm, "", nil
}

// GetCharge implements gateway.Gateway. With the payer named (the engine
// always names it) it lists the customer's PaymentIntents created since
// the payment's due time, a strongly consistent read, and matches
// metadata[paysched_payment_id]: nothing there is a proven absence
// (gateway.Absent). Without a payer it can only use the Search API, whose
// index lags writes (usually under a minute, up to an hour in incidents):
// a miss there is a plain NOT_FOUND, which proves nothing.
func (a *Adapter) GetCharge(ctx context.Context, req *gatewayv1.GetChargeRequest) (*gatewayv1.Charge, error) {
	key := req.GetIdempotencyKey()
	if req.GetPayer() == "" {
		return a.search(ctx, key)
	}
	cus, _, ok := parsePayer(req.GetPayer())
	if !ok {
		// Charge never sends a request for a payer that is not a customer
		// id (payers never change), so no PaymentIntent can exist for it.
		return nil, gateway.Absent("stripe: payer %q is not a Stripe customer: no PaymentIntent is ever made for it", req.GetPayer())
	}
	since := windowStart(req.GetNotBefore())
	found, read, complete, err := a.listFor(ctx, cus, key, since)
	if err != nil {
		return nil, err
	}
	if !complete {
		// A partial read proves nothing and decides nothing: what it did
		// not read may hold this payment's success (or a second one). Not
		// knowing is an unproven NOT_FOUND: asked again later.
		return nil, status.Errorf(codes.NotFound, "stripe: customer %s has more PaymentIntents since %s than this probe could read in its time (%d read, %d of them this payment's): not known",
			cus, since.Format(time.RFC3339), read, len(found))
	}
	return pick(key, found, fmt.Sprintf("customer %s since %s", cus, since.Format(time.RFC3339)))
}

// ClockSkew widens the listing window: the engine's clock (the due time)
// and Stripe's (created) may disagree by up to gateway.ClockSkew.
const ClockSkew = gateway.ClockSkew

// windowStart is where a listing for a payment due at notBefore starts:
// the due time less the skew margin (nil: the whole history).
func windowStart(notBefore *timestamppb.Timestamp) time.Time {
	if notBefore == nil {
		return time.Time{}
	}
	return notBefore.AsTime().Add(-ClockSkew)
}

// maxPages bounds one listing when its caller set no deadline (100
// PaymentIntents a page); with a deadline, the deadline does.
const maxPages = 100

// listFor lists customer cus's PaymentIntents created since since (zero:
// all) and returns those made for key, and how many it read. It reads
// page after page while its caller's time allows one more (the last
// page's duration, twice, must fit before ctx's deadline): a customer's
// PaymentIntents since a due time fit, however long its history. complete
// is false when it stopped before the end (out of time, or maxPages):
// then what it found decides nothing.
func (a *Adapter) listFor(ctx context.Context, cus, key string, since time.Time) (found []*stripe.PaymentIntent, read int, complete bool, err error) {
	p := &stripe.PaymentIntentListParams{Customer: stripe.String(cus)}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	if !since.IsZero() {
		p.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}
	}
	for pages := 0; ; pages++ {
		if pages == maxPages {
			return found, read, false, nil
		}
		start := a.now()
		// One page by hand, as stripe-go's iterator does it, to see
		// has_more.
		q := &form.Values{}
		form.AppendTo(q, p)
		list := &stripe.PaymentIntentList{}
		if err := a.api.CallRaw(http.MethodGet, "/v1/payment_intents", a.key.key, []byte(q.Encode()), p.GetParams(), list); err != nil {
			if ctx.Err() != nil && pages > 0 {
				// Our own time ran out mid-listing: not Stripe's failure.
				return found, read, false, nil
			}
			return nil, read, false, a.toStatus("list payment intents of "+cus, err)
		}
		for _, pi := range list.Data {
			if pi.Metadata[MetaPaymentID] == key {
				found = append(found, pi)
			}
		}
		read += len(list.Data)
		if !list.HasMore || len(list.Data) == 0 {
			return found, read, true, nil
		}
		if d, ok := ctx.Deadline(); ok && d.Sub(a.now()) < 2*a.now().Sub(start) {
			return found, read, false, nil
		}
		p.StartingAfter = stripe.String(list.Data[len(list.Data)-1].ID)
	}
}

// search looks a key up with the Search API: eventually consistent, so a
// miss is not a proof.
func (a *Adapter) search(ctx context.Context, key string) (*gatewayv1.Charge, error) {
	p := &stripe.PaymentIntentSearchParams{SearchParams: stripe.SearchParams{
		Query: fmt.Sprintf("metadata['%s']:'%s'", MetaPaymentID, escapeSearch(key)),
		Limit: stripe.Int64(100),
	}}
	var found []*stripe.PaymentIntent
	for pi, err := range a.sc.V1PaymentIntents.Search(ctx, p) {
		if err != nil {
			return nil, a.toStatus("search payment intents", err)
		}
		found = append(found, pi)
	}
	if len(found) == 0 {
		return nil, status.Errorf(codes.NotFound, "stripe: Search finds no PaymentIntent with metadata %s=%s (its index may lag)", MetaPaymentID, key)
	}
	return pick(key, found, "")
}

// CancelCharge implements gateway.Gateway: it cancels the PaymentIntent
// (cancellation_reason as asked, "abandoned" by default) and answers it as
// it then stands. A PaymentIntent Stripe will not cancel because it was
// decided meanwhile (or was cancelled already) is read again and answered
// as it is; one still processing is FAILED_PRECONDITION.
func (a *Adapter) CancelCharge(ctx context.Context, req *gatewayv1.CancelChargeRequest) (*gatewayv1.Charge, error) {
	id := req.GetChargeId()
	if !strings.HasPrefix(id, "pi_") {
		return nil, status.Errorf(codes.InvalidArgument, "stripe: charge id %q is not a PaymentIntent id", id)
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "abandoned"
	}
	p := &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String(reason)}
	p.SetIdempotencyKey("cancel-" + req.GetIdempotencyKey())
	pi, err := a.sc.V1PaymentIntents.Cancel(ctx, id, p)
	if err == nil {
		return toCharge(pi), nil
	}
	var se *stripe.Error
	if !errors.As(err, &se) || se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
		return nil, a.toStatus("cancel payment intent "+id, err)
	}
	// Not cancellable in its state: read what it is now (a retrieve is
	// strongly consistent).
	pi, err = a.sc.V1PaymentIntents.Retrieve(ctx, id, nil)
	if err != nil {
		return nil, a.toStatus("retrieve payment intent "+id, err)
	}
	c := toCharge(pi)
	if c.GetStatus() == gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING {
		return nil, status.Errorf(codes.FailedPrecondition, "stripe: PaymentIntent %s is %s and cannot be cancelled now", id, pi.Status)
	}
	return c, nil
}

// pick chooses what GetCharge answers among the PaymentIntents found:
// one that succeeded; else one not decided yet (it may still succeed);
// else the latest decline. Two that succeeded is a double charge: an
// error, so the engine reads it as unresolved and a human looks. None is
// the proven absence of a strongly consistent read over where (which
// names it).
func pick(key string, found []*stripe.PaymentIntent, where string) (*gatewayv1.Charge, error) {
	if len(found) == 0 {
		return nil, gateway.Absent("stripe: no PaymentIntent with metadata %s=%s among those of %s", MetaPaymentID, key, where)
	}
	var succeeded, open, failed []*stripe.PaymentIntent
	for _, pi := range found {
		switch toCharge(pi).GetStatus() {
		case gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED:
			succeeded = append(succeeded, pi)
		case gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED:
			failed = append(failed, pi)
		default:
			open = append(open, pi)
		}
	}
	switch {
	case len(succeeded) > 1:
		ids := make([]string, len(succeeded))
		for i, pi := range succeeded {
			ids[i] = pi.ID
		}
		return nil, status.Errorf(codes.Internal, "stripe: %d succeeded PaymentIntents under key %s (%s): charged more than once",
			len(succeeded), key, strings.Join(ids, ", "))
	case len(succeeded) == 1:
		return toCharge(succeeded[0]), nil
	case len(open) > 0:
		return toCharge(latest(open)), nil
	default:
		return toCharge(latest(failed)), nil
	}
}

func latest(pis []*stripe.PaymentIntent) *stripe.PaymentIntent {
	l := pis[0]
	for _, pi := range pis[1:] {
		if pi.Created > l.Created {
			l = pi
		}
	}
	return l
}

// escapeSearch escapes a value for a single-quoted string of Stripe's
// search query language.
func escapeSearch(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

// toCharge maps a PaymentIntent to the port's Charge. Key and reference
// come from the PaymentIntent's metadata, not from the request, so the
// engine's strict reading checks what Stripe holds.
func toCharge(pi *stripe.PaymentIntent) *gatewayv1.Charge {
	c := &gatewayv1.Charge{
		ChargeId:       pi.ID,
		IdempotencyKey: pi.Metadata[MetaPaymentID],
		Reference:      pi.Metadata[MetaPaymentID],
		Amount:         pi.Amount,
		Currency:       strings.ToUpper(string(pi.Currency)),
		Payee:          pi.Metadata[MetaPayee],
		CreatedAt:      timestamppb.New(time.Unix(pi.Created, 0)),
	}
	if pi.Customer != nil {
		c.Payer = pi.Customer.ID
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		c.Status = gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		// Confirmed and failed: we always confirm on create, so this is a
		// decline, and the PaymentIntent will not be retried by Stripe.
		c.Status = gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED
		c.DeclineReason = declineReason(pi.LastPaymentError, string(pi.Status))
	case stripe.PaymentIntentStatusCanceled:
		c.Status = gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED
		c.DeclineReason = "canceled"
		if pi.CancellationReason != "" {
			c.DeclineReason += ": " + string(pi.CancellationReason)
		}
	case stripe.PaymentIntentStatusRequiresAction:
		// 3-D Secure wanted: off-session nobody will authenticate, so the
		// engine cancels it after its bound (AUTHENTICATION_REQUIRED).
		c.Status = gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING
		c.PendingReason = gatewayv1.PendingReason_PENDING_REASON_ACTION_REQUIRED
	case stripe.PaymentIntentStatusProcessing,
		stripe.PaymentIntentStatusRequiresConfirmation, stripe.PaymentIntentStatusRequiresCapture:
		// Undecided at Stripe or the bank (we confirm with automatic
		// capture, so the last two are unexpected: undecided too).
		c.Status = gatewayv1.ChargeStatus_CHARGE_STATUS_PENDING
		c.PendingReason = gatewayv1.PendingReason_PENDING_REASON_PROCESSING
	default:
		// A status this code does not know stays unspecified: the engine
		// reads it as ambiguous, never as a success.
		c.Status = gatewayv1.ChargeStatus_CHARGE_STATUS_UNSPECIFIED
	}
	return c
}

// declineReason is Stripe's decline_code, else its error code.
func declineReason(e *stripe.Error, fallback string) string {
	switch {
	case e == nil:
		return fallback
	case e.DeclineCode != "":
		return string(e.DeclineCode)
	case e.Code != "":
		return string(e.Code)
	case e.Type != "":
		return string(e.Type)
	}
	return fallback
}

// isDecline: Stripe refused the payment method (402 card_error): a
// definitive answer, nothing charged.
func isDecline(se *stripe.Error) bool {
	return se.Type == stripe.ErrorTypeCard
}

// declined is the Charge of a card decline. Stripe's error carries the
// PaymentIntent it made; without one the charge is the request's, since the
// decline answers exactly this key.
func declined(req *gatewayv1.ChargeRequest, se *stripe.Error) *gatewayv1.Charge {
	var c *gatewayv1.Charge
	if se.PaymentIntent != nil && se.PaymentIntent.ID != "" {
		c = toCharge(se.PaymentIntent)
	} else {
		c = fromRequest(req)
	}
	c.Status = gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED
	c.DeclineReason = declineReason(se, "card_error")
	return c
}

// declineUnlessCharged answers a payment the adapter will not send (its
// customer is gone or cannot pay) DECLINED only once Stripe has proven it
// holds no PaymentIntent for it: an earlier attempt may have charged it
// before the customer changed, and that charge is the answer. When that
// cannot be proven, nothing is decided: UNAVAILABLE, which the engine
// reads as "may have charged" and asks about again.
func (a *Adapter) declineUnlessCharged(ctx context.Context, req *gatewayv1.ChargeRequest, cus, reason string) (*gatewayv1.Charge, error) {
	since := windowStart(req.GetNotBefore())
	found, read, complete, err := a.listFor(ctx, cus, req.GetIdempotencyKey(), since)
	switch {
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "stripe: %s, and whether an earlier attempt charged it is unknown: %s",
			reason, status.Convert(err).Message())
	case !complete:
		// Checked before what was found: a partial read decides nothing
		// (a decline it saw may be followed by a success it did not).
		return nil, status.Errorf(codes.Unavailable, "stripe: %s, and customer %s has more PaymentIntents since %s than could be read in time (%d read) to prove none is this payment's",
			reason, cus, since.Format(time.RFC3339), read)
	case len(found) > 0:
		return pick(req.GetIdempotencyKey(), found, "")
	}
	return declinedLocally(req, reason), nil
}

// declinedLocally is the Charge of a payment refused before anything was
// sent to charge it.
func declinedLocally(req *gatewayv1.ChargeRequest, reason string) *gatewayv1.Charge {
	c := fromRequest(req)
	c.Status = gatewayv1.ChargeStatus_CHARGE_STATUS_DECLINED
	c.DeclineReason = reason
	return c
}

func fromRequest(req *gatewayv1.ChargeRequest) *gatewayv1.Charge {
	return &gatewayv1.Charge{
		IdempotencyKey: req.GetIdempotencyKey(), Reference: req.GetIdempotencyKey(),
		Amount: req.GetAmount(), Currency: req.GetCurrency(), Payer: req.GetPayer(), Payee: req.GetPayee(),
		CreatedAt: timestamppb.Now(),
	}
}

func quote(s string) string { return fmt.Sprintf("%q", s) }
