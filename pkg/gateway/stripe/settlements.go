package stripeadapter

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
)

// maxPage is Stripe's largest list page.
const maxPage = 100

// ListSettlements implements gateway.Gateway: one page of the UTC day's
// balance transactions, each charge mapped to its payment through the
// PaymentIntent's metadata. The page token is Stripe's starting_after (the
// last transaction id of the page before). Pages hold at most 100
// transactions, and only those that are our charges are answered, so a page
// may be short, or empty, and still have a next one.
func (a *Adapter) ListSettlements(ctx context.Context, req *gatewayv1.ListSettlementsRequest) (*gatewayv1.ListSettlementsResponse, error) {
	day, err := time.Parse(time.DateOnly, req.GetDay())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "stripe: day %q: want YYYY-MM-DD", req.GetDay())
	}
	size := int64(req.GetPageSize())
	if size <= 0 || size > maxPage {
		size = maxPage
	}
	p := &stripe.BalanceTransactionListParams{
		CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: day.Unix(), LesserThan: day.AddDate(0, 0, 1).Unix()},
	}
	p.Context = ctx
	p.Limit = stripe.Int64(size)
	if tok := req.GetPageToken(); tok != "" {
		if !strings.HasPrefix(tok, "txn_") {
			return nil, status.Errorf(codes.InvalidArgument, "stripe: page token %q is not a balance transaction id", tok)
		}
		p.StartingAfter = stripe.String(tok)
	}
	// The source is the Charge, and its PaymentIntent is what Charge and
	// GetCharge name. Stripe copies the PaymentIntent's metadata to the
	// charge once, at confirmation; the PaymentIntent's own is read first,
	// since only it is what GetCharge searches.
	p.AddExpand("data.source")
	p.AddExpand("data.source.payment_intent")
	// One page by hand, as stripe-go's iterator does it, to see has_more.
	q := &form.Values{}
	form.AppendTo(q, p)
	list := &stripe.BalanceTransactionList{}
	if err := a.api.CallRaw(http.MethodGet, "/v1/balance_transactions", a.key.key, []byte(q.Encode()), p.GetParams(), list); err != nil {
		return nil, a.toStatus("list balance transactions", err)
	}
	out := &gatewayv1.ListSettlementsResponse{}
	for _, bt := range list.Data {
		if c := settled(bt); c != nil {
			out.Charges = append(out.Charges, c)
		}
	}
	if list.HasMore && len(list.Data) > 0 {
		out.NextPageToken = list.Data[len(list.Data)-1].ID
	}
	return out, nil
}

// settled maps a balance transaction to the settled charge of a payment, or
// nil when it is not one: not a charge (refunds, fees, payouts), not
// succeeded, or not made by paysched (no paymentId in its metadata).
func settled(bt *stripe.BalanceTransaction) *gatewayv1.Charge {
	if bt.Type != stripe.BalanceTransactionTypeCharge && bt.Type != stripe.BalanceTransactionTypePayment {
		return nil
	}
	src := bt.Source
	if src == nil || src.Type != stripe.BalanceTransactionSourceTypeCharge || src.Charge == nil {
		return nil
	}
	ch := src.Charge
	if ch.Status != stripe.ChargeStatusSucceeded {
		return nil
	}
	id, payee, chargeID := ch.Metadata[MetaPaymentID], ch.Metadata[MetaPayee], ch.ID
	if pi := ch.PaymentIntent; pi != nil {
		// The PaymentIntent is what Charge and GetCharge name.
		chargeID = pi.ID
		if v := pi.Metadata[MetaPaymentID]; v != "" {
			id, payee = v, pi.Metadata[MetaPayee]
		}
	}
	if id == "" {
		return nil
	}
	c := &gatewayv1.Charge{
		ChargeId: chargeID, IdempotencyKey: id, Reference: id,
		// The charge's own amount and currency, not the balance
		// transaction's, which may be converted to the account's currency.
		Amount: ch.Amount, Currency: strings.ToUpper(string(ch.Currency)), Payee: payee,
		Status:    gatewayv1.ChargeStatus_CHARGE_STATUS_SUCCEEDED,
		CreatedAt: timestamppb.New(time.Unix(ch.Created, 0)),
	}
	if ch.Customer != nil {
		c.Payer = ch.Customer.ID
	}
	return c
}
