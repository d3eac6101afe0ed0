package gatewayhook

import (
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// StripeHeader is the header Stripe signs its events in. Stripe's scheme
// is the one Verify checks: "t=<unix>,v1=<hex HMAC-SHA256(secret,
// "<t>.<body>")>", with possibly several v1 entries while a secret rolls.
const StripeHeader = "Stripe-Signature"

// Stripe event types the receiver acts on.
const (
	StripeSucceeded = "payment_intent.succeeded"
	StripeFailed    = "payment_intent.payment_failed"
)

// StripeMetadataKey is the PaymentIntent metadata entry that names the
// payment (the Stripe adapter sets it on every charge).
const StripeMetadataKey = "paysched_payment_id"

// ErrNotStripeEvent means the body is not a Stripe event.
var ErrNotStripeEvent = errors.New("body is not a Stripe event")

type stripeEvent struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Type     string `json:"type"`
	Created  int64  `json:"created"`
	Livemode bool   `json:"livemode"`
	// Account is set on a Connect event: one about a connected account.
	Account string `json:"account"`
	Data    struct {
		Object struct {
			ID     string `json:"id"`
			Object string `json:"object"`
			// Customer is the customer's id, or the customer itself when
			// expanded, or null.
			Customer         json.RawMessage   `json:"customer"`
			Amount           int64             `json:"amount"`
			Currency         string            `json:"currency"`
			Status           string            `json:"status"`
			Created          int64             `json:"created"`
			Metadata         map[string]string `json:"metadata"`
			LastPaymentError *struct {
				Code        string `json:"code"`
				DeclineCode string `json:"decline_code"`
			} `json:"last_payment_error"`
		} `json:"object"`
	} `json:"data"`
}

// ParseStripe maps a Stripe event to the receiver's Event: a
// payment_intent.succeeded to TypeSucceeded, a payment_intent.payment_failed
// to TypeDeclined with its decline code, keyed by the payment the
// PaymentIntent's metadata names. Other event types come back with their
// Stripe type, which the receiver records and ignores.
func ParseStripe(body []byte) (Event, error) {
	var se stripeEvent
	if err := json.Unmarshal(body, &se); err != nil || se.ID == "" || se.Object != "event" {
		return Event{}, ErrNotStripeEvent
	}
	o := se.Data.Object
	e := Event{ID: se.ID, Type: se.Type, Created: se.Created, Livemode: se.Livemode, Account: se.Account}
	if o.Object != "payment_intent" {
		return e, nil
	}
	e.Data = Charge{ChargeID: o.ID, IdempotencyKey: o.Metadata[StripeMetadataKey], Reference: o.Metadata[StripeMetadataKey],
		Payer: stripeID(o.Customer), Amount: o.Amount, Currency: strings.ToUpper(o.Currency), Status: o.Status,
		CreatedAt: time.Unix(o.Created, 0).UTC()}
	switch se.Type {
	case StripeSucceeded:
		if o.Status == "succeeded" {
			e.Type = TypeSucceeded
		}
	case StripeFailed:
		// payment_failed reports that an attempt failed, not that the
		// PaymentIntent is finished: only a PaymentIntent left without a
		// method to retry (requires_payment_method, as the adapter confirms
		// once) or cancelled is declined for good. Any other status (it may
		// still be authenticated, processed or succeed) is left to the
		// engine's probes.
		if o.Status != "requires_payment_method" && o.Status != "canceled" {
			break
		}
		e.Type = TypeDeclined
		if pe := o.LastPaymentError; pe != nil {
			e.Data.DeclineReason = pe.DeclineCode
			if e.Data.DeclineReason == "" {
				e.Data.DeclineReason = pe.Code
			}
		}
	}
	return e, nil
}

// stripeID reads an expandable field: an id, or the object with its id;
// "" for null or anything else.
func stripeID(raw json.RawMessage) string {
	var id string
	if json.Unmarshal(raw, &id) == nil {
		return id
	}
	var obj struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.ID
	}
	return ""
}
