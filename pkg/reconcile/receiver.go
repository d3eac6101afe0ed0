package reconcile

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/pkg/gateway/gatewayhook"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/reconcile/reconciledb"
	"github.com/paysched/paysched/pkg/store"
)

// Receiver is the gateway webhook endpoint. It verifies the signature and
// the timestamp, then applies a definitive outcome through the same fenced
// transition as everything else, once per event id.
type Receiver struct {
	DB *pgxpool.Pool
	// Secret verifies gateway-sim's deliveries (ServeHTTP).
	Secret []byte
	// StripeSecret verifies Stripe's (Stripe), the endpoint's signing secret.
	StripeSecret []byte
	// Account and Livemode are what gateway.v1 events (ServeHTTP) must
	// say: the account the gateway charges in ("": the one it has) and
	// whether it moves real money (gateway-sim: false). StripeAccount and
	// StripeLivemode are Stripe's: our account's id when the endpoint is a
	// platform's ("": events naming any account, a connected account's,
	// are not ours) and the Stripe key's mode. An event of another account
	// or mode is ignored and counted.
	Account, StripeAccount   string
	Livemode, StripeLivemode bool
	// Tolerance for the signed timestamp (default 5 minutes).
	Tolerance time.Duration
	Metrics   *Metrics
	Log       *slog.Logger
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// maxWebhookBody bounds what a delivery may send.
const maxWebhookBody = 64 << 10

func (rc *Receiver) fail(w http.ResponseWriter, code int, result, msg string) {
	rc.Metrics.webhook(result)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]string{"error": msg})
	_, _ = w.Write(b)
}

// ServeHTTP handles POST /webhooks/gateway: gateway-sim's events, signed
// in gatewayhook.Header with Secret.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.handle(w, r, gatewayhook.Header, rc.Secret, ours{account: rc.Account, livemode: rc.Livemode, payer: samePayer},
		func(body []byte) (gatewayhook.Event, error) {
			var e gatewayhook.Event
			if err := json.Unmarshal(body, &e); err != nil || e.ID == "" {
				return e, errors.New("body is not a webhook event")
			}
			return e, nil
		})
}

// ours is what ties an event to a payment of ours: the account and mode
// the charge was made in, and whether the payer it names is the payment's.
type ours struct {
	account  string
	livemode bool
	payer    func(event, payment string) bool
}

// samePayer: gateway.v1 events name the payer as the engine sent it.
func samePayer(event, payment string) bool { return event != "" && event == payment }

// stripeCustomer: Stripe events name the PaymentIntent's customer, the
// payer's customer part (the adapter reads a payer as cus_... or
// cus_.../pm_...).
func stripeCustomer(event, payment string) bool {
	cus, _, _ := strings.Cut(payment, "/")
	return event != "" && event == cus
}

// Stripe is the handler of POST /webhooks/stripe: Stripe-signed events
// (gatewayhook.StripeHeader, verified with StripeSecret, the endpoint's
// whsec_ secret). payment_intent.succeeded and payment_intent.payment_failed
// go through the same fenced moves, once per event id, as gateway-sim's.
func (rc *Receiver) Stripe() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.handle(w, r, gatewayhook.StripeHeader, rc.StripeSecret,
			ours{account: rc.StripeAccount, livemode: rc.StripeLivemode, payer: stripeCustomer}, gatewayhook.ParseStripe)
	})
}

// handle reads, verifies (signature, then timestamp) and applies one
// delivery; decode maps the verified body to an Event.
func (rc *Receiver) handle(w http.ResponseWriter, r *http.Request, header string, secret []byte, mine ours,
	decode func([]byte) (gatewayhook.Event, error)) {
	if r.Method != http.MethodPost {
		rc.fail(w, http.StatusMethodNotAllowed, "bad_request", "POST only")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
	if err != nil {
		rc.fail(w, http.StatusBadRequest, "bad_request", "cannot read body")
		return
	}
	if len(body) > maxWebhookBody {
		rc.fail(w, http.StatusRequestEntityTooLarge, "bad_request", "body too large")
		return
	}
	now := time.Now()
	if rc.Now != nil {
		now = rc.Now()
	}
	tol := rc.Tolerance
	if tol <= 0 {
		tol = 5 * time.Minute
	}
	switch err := gatewayhook.Verify(secret, r.Header.Get(header), body, now, tol); {
	case errors.Is(err, gatewayhook.ErrSignature):
		rc.fail(w, http.StatusUnauthorized, "bad_signature", err.Error())
		return
	case errors.Is(err, gatewayhook.ErrStale):
		rc.fail(w, http.StatusBadRequest, "stale", err.Error())
		return
	case err != nil:
		rc.fail(w, http.StatusBadRequest, "bad_signature", err.Error())
		return
	}
	e, err := decode(body)
	if err != nil {
		rc.fail(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if (e.Type == gatewayhook.TypeSucceeded || e.Type == gatewayhook.TypeDeclined) && (e.Data.Amount <= 0 || e.Data.Currency == "") {
		// An outcome without its amount cannot be checked against the
		// payment's: never applied, whoever signed it.
		rc.fail(w, http.StatusBadRequest, "bad_request", "the event's charge has no amount or currency")
		return
	}
	result, err := rc.apply(r, e, mine)
	if err != nil {
		// Our failure: the gateway retries the delivery.
		rc.log().Error("apply webhook", "event", e.ID, "err", err)
		rc.fail(w, http.StatusServiceUnavailable, "error", "could not apply the event, retry later")
		return
	}
	rc.Metrics.webhook(result)
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]string{"result": result})
	_, _ = w.Write(b)
}

func (rc *Receiver) log() *slog.Logger {
	if rc.Log == nil {
		return slog.Default()
	}
	return rc.Log
}

// apply records the event id and applies its outcome in one transaction:
// a duplicate delivery finds the id and changes nothing. An outcome moves
// a payment only when the event is about it as we charged it (mine): our
// account and mode, the payment's payer, and a payment the engine sent to
// the gateway (attempt > 0). A signed event that names a payment under
// another customer, a connected account or the other mode, or one never
// claimed, is a charge we did not make: it is ignored and counted by why
// ("ignored_account", "ignored_livemode", "ignored_payer",
// "ignored_unclaimed"), never applied.
func (rc *Receiver) apply(r *http.Request, e gatewayhook.Event, mine ours) (string, error) {
	ctx := r.Context()
	result := "ignored"
	err := pgx.BeginFunc(ctx, rc.DB, func(tx pgx.Tx) error {
		n, err := reconciledb.New(tx).RecordWebhookEvent(ctx, reconciledb.RecordWebhookEventParams{EventID: e.ID, ChargeKey: e.Data.IdempotencyKey})
		if err != nil {
			return err
		}
		if n == 0 {
			result = "duplicate"
			return nil
		}
		id, err := uuid.Parse(e.Data.IdempotencyKey)
		if err != nil {
			return nil // not one of ours: recorded, nothing to move
		}
		// Only rows no executor is working on. A PROCESSING payment is left
		// to its executor, and that is harmless: the executor reads the
		// same outcome from the gateway (its Charge's answer, or its probe
		// when the answer is lost), and if its attempt ends without it the
		// payment keeps probe_first, so the next attempt asks the gateway,
		// which holds the charge (TestWebhookWhileProcessingIsHarmless).
		// PENDING here means an earlier attempt was ambiguous. A charge of
		// another amount or currency moves nothing (the move's check).
		m := store.OutOfBandMove{ID: id, By: payment.Webhook, Actor: "gateway-webhook",
			Action: "WEBHOOK", Amount: e.Data.Amount, Currency: e.Data.Currency}
		switch e.Type {
		case gatewayhook.TypeSucceeded:
			m.To, m.GatewayRef, m.Reason = payment.Completed, e.Data.ChargeID, "webhook "+e.ID+": charge succeeded"
		case gatewayhook.TypeDeclined:
			m.To, m.LastError, m.Reason = payment.Failed, "declined: "+e.Data.DeclineReason, "webhook "+e.ID+": charge declined"
		default:
			return nil
		}
		switch {
		case e.Account != mine.account:
			result = "ignored_account"
			return nil
		case e.Livemode != mine.livemode:
			result = "ignored_livemode"
			return nil
		}
		target, err := store.TargetOf(ctx, tx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil
		case err != nil:
			return err
		case !mine.payer(e.Data.Payer, target.Payer):
			result = "ignored_payer"
			return nil
		case target.Attempt == 0:
			result = "ignored_unclaimed"
			return nil
		}
		switch _, err := store.Apply(ctx, tx, m); {
		case errors.Is(err, store.ErrNotMoved):
			return nil
		case err != nil:
			return err
		}
		result = "applied"
		return nil
	})
	return result, err
}
