package paysched

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"

	"github.com/paysched/paysched/sdk/go/api"
)

// The resources, as the generated layer names them.
type (
	// Payment is a scheduled payment.
	Payment = api.V1ScheduledPayment
	// NewPayment is a payment to schedule: payee, amount, currency, due
	// time, description and metadata.
	NewPayment = api.V1CreateScheduledPaymentRequest
	// BatchResult is one item's outcome in CreatePayments.
	BatchResult = api.V1BatchCreateResult
	// Status is a payment's status.
	Status = api.ListScheduledPaymentsParamsStatus
)

// MaxBatch is the most items the server takes in one batch; CreatePayments
// splits longer lists.
const MaxBatch = 1000

// Created is what a create answered: the resource, whether the server
// replayed the answer to an earlier request with the same key (no second
// payment was made), and the key.
type Created[T any] struct {
	Value          *T
	Replayed       bool
	IdempotencyKey string
}

// CallOption adjusts one call.
type CallOption func(*call)

type call struct{ key string }

// WithIdempotencyKey sends key as the create's idempotency key, instead of
// one the SDK makes: a retry of the same business action (after a crash of
// the caller) must send the same key.
func WithIdempotencyKey(key string) CallOption { return func(c *call) { c.key = key } }

func options(opts []CallOption) call {
	var c call
	for _, o := range opts {
		o(&c)
	}
	if c.key == "" {
		c.key = NewKey()
	}
	return c
}

// NewKey is a fresh idempotency key (a random UUID).
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func replayed(hr *http.Response) bool { return hr != nil && hr.Header.Get(replayedHeader) == "true" }

// CreatePayment schedules a payment. It carries an idempotency key (made
// for the call unless WithIdempotencyKey gives one) that every retry of
// the call sends again, so at most one payment is made; Replayed says the
// server answered an earlier request's payment.
func (c *Client) CreatePayment(ctx context.Context, p NewPayment, opts ...CallOption) (*Created[Payment], error) {
	o := options(opts)
	r, err := c.raw.CreateScheduledPaymentWithResponse(ctx, &api.CreateScheduledPaymentParams{IdempotencyKey: &o.key}, p)
	if err != nil {
		return nil, transport(err)
	}
	v, err := decoded(r.HTTPResponse, r.Body, r.JSON201, http.StatusCreated, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return &Created[Payment]{Value: v, Replayed: replayed(r.HTTPResponse), IdempotencyKey: o.key}, nil
}

// GetPayment reads a payment with its attempts.
func (c *Client) GetPayment(ctx context.Context, id string) (*Payment, error) {
	r, err := c.raw.GetScheduledPaymentWithResponse(ctx, id)
	if err != nil {
		return nil, transport(err)
	}
	return decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK)
}

// CancelPayment cancels a PENDING payment (again: the same answer);
// ErrAlreadyProcessing once a sweeper has claimed it.
func (c *Client) CancelPayment(ctx context.Context, id string) (*Payment, error) {
	r, err := c.raw.CancelScheduledPaymentWithResponse(ctx, id)
	if err != nil {
		return nil, transport(err)
	}
	return decoded(r.HTTPResponse, r.Body, r.JSON200, http.StatusOK)
}

// ListPayments filters Payments.
type ListPayments struct {
	// Status, when set, lists only payments in it.
	Status Status
	// PageSize is the size of each page asked for (0: the server's).
	PageSize int32
}

// Payments iterates over the caller's payments, newest first, page after
// page; an error ends the iteration after it is yielded.
func (c *Client) Payments(ctx context.Context, f ListPayments) iter.Seq2[Payment, error] {
	return pages(func(cursor *string) ([]Payment, *string, error) {
		params := &api.ListScheduledPaymentsParams{Cursor: cursor}
		if f.Status != "" {
			params.Status = &f.Status
		}
		if f.PageSize > 0 {
			params.PageSize = &f.PageSize
		}
		r, err := c.raw.ListScheduledPaymentsWithResponse(ctx, params)
		if err != nil {
			return nil, nil, transport(err)
		}
		if err := answered(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
			return nil, nil, err
		}
		page, err := value(r.JSON200)
		if err != nil {
			return nil, nil, err
		}
		return deref(page.Payments), page.NextCursor, nil
	})
}

// pages walks a cursor: fetch answers a page and the next cursor (nil or
// empty: the last page).
func pages[T any](fetch func(cursor *string) ([]T, *string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var cursor *string
		for {
			items, next, err := fetch(cursor)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == nil || *next == "" {
				return
			}
			cursor = next
		}
	}
}

func deref[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

// maxBatchBytes bounds one batch's body, under the server's 8 MiB.
const maxBatchBytes = 4 << 20

// CreatePayments schedules many payments in batches of at most MaxBatch
// items (and 4 MiB), and returns the results in items' order, each Index
// the item's in items. Each item's RequestId (its idempotency key) is
// filled in items itself when empty: after an error (a batch the server
// refused as a whole ends the call, with the results of the batches
// before it), calling again with the same items makes each payment once.
func (c *Client) CreatePayments(ctx context.Context, items []NewPayment) ([]BatchResult, error) {
	for i := range items {
		if items[i].RequestId == nil || *items[i].RequestId == "" {
			k := NewKey()
			items[i].RequestId = &k
		}
	}
	out := make([]BatchResult, 0, len(items))
	for from := 0; from < len(items); {
		to, size := from, 0
		for to < len(items) && to-from < MaxBatch {
			b, err := json.Marshal(items[to])
			if err != nil {
				return out, fmt.Errorf("paysched: item %d: %w", to, err)
			}
			if to > from && size+len(b) > maxBatchBytes {
				break
			}
			size += len(b) + 1
			to++
		}
		chunk := items[from:to]
		r, err := c.raw.BatchCreateScheduledPaymentsWithResponse(retrySafe(ctx), api.V1BatchCreateScheduledPaymentsRequest{Items: &chunk})
		if err != nil {
			return out, transport(err)
		}
		if err := answered(r.HTTPResponse, r.Body, http.StatusOK); err != nil {
			return out, err
		}
		page, err := value(r.JSON200)
		if err != nil {
			return out, err
		}
		for _, res := range deref(page.Results) {
			if res.Index != nil {
				i := *res.Index + int32(from)
				res.Index = &i
			}
			out = append(out, res)
		}
		from = to
	}
	return out, nil
}
