package payments

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// ChargeCreate charges params.CustomerID with params.Tag as metadata, under
// params.IdempotencyKey, on params.API: a PaymentIntent created and
// confirmed with the rider present (service.PaymentAPIIntents), which may
// come back waiting for the rider's authentication
// (service.ChargeRequiresAction), or a charge of the Charges API. A
// declined card is a PaymentClassDecline error; a payment Stripe answers
// without error but neither made nor waiting (a pending charge) is
// PaymentClassUnavailable, to be settled later through ChargeFind.
func (c *Client) ChargeCreate(ctx context.Context, params service.ChargeCreateParams) (*service.Charge, error) {
	if err := checkKey(params.IdempotencyKey); err != nil {
		return nil, err
	}
	if params.API == service.PaymentAPIIntents {
		return c.intentCreate(ctx, params)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.ChargeParams{
		Amount:   stripe.Int64(params.AmountCents),
		Currency: stripe.String(params.Currency),
		Customer: stripe.String(params.CustomerID),
	}
	p.Context = ctx
	p.SetIdempotencyKey(params.IdempotencyKey)
	if params.Description != "" {
		p.Description = stripe.String(params.Description)
	}
	tagMetadata(p.AddMetadata, params.Tag)
	ch, err := c.charges.New(p)
	if err != nil {
		return nil, translateError(err)
	}
	return succeeded(ch)
}

// ChargeFind returns the payments made under the processor key
// params.Key. On the PaymentIntents API: the customer's PaymentIntents of
// that key, listed (intentFind). On the Charges API: the succeeded charges,
// found by searching metadata ar_key; failed attempts carry the same
// metadata and are skipped. Stripe's search index lags writes by up to
// about a minute.
func (c *Client) ChargeFind(ctx context.Context, params service.ChargeFindParams) ([]*service.Charge, error) {
	if params.API == service.PaymentAPIIntents {
		return c.intentFind(ctx, params)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.ChargeSearchParams{}
	p.Context = ctx
	p.Query = keyQuery(params.Key)
	it := c.charges.Search(p)
	out := []*service.Charge{}
	for it.Next() {
		if ch := it.Charge(); ch.Status == stripe.ChargeStatusSucceeded {
			out = append(out, toCharge(ch))
		}
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	return out, nil
}

// ChargeGet returns the charge id, or (nil, nil) when Stripe answers 404.
func (c *Client) ChargeGet(ctx context.Context, id string) (*service.Charge, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.ChargeParams{}
	p.Context = ctx
	ch, err := c.charges.Get(id, p)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, translateError(err)
	}
	return toCharge(ch), nil
}

// ChargeListSince returns every charge created at or after since, following
// Stripe's pages.
func (c *Client) ChargeListSince(ctx context.Context, since time.Time) ([]*service.Charge, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.ChargeListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	it := c.charges.List(p)
	out := []*service.Charge{}
	for it.Next() {
		out = append(out, toCharge(it.Charge()))
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	return out, nil
}

// isNotFound reports whether Stripe answered 404: no object of that id.
func isNotFound(err error) bool {
	var se *stripe.Error
	return errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound
}

// errChargeNotSucceeded underlies the error for a charge answered with a
// status other than succeeded.
var errChargeNotSucceeded = errors.New("payments: charge did not succeed")

// succeeded returns ch as a service.Charge if it succeeded. A failed charge
// is a decline; any other status is indeterminate.
func succeeded(ch *stripe.Charge) (*service.Charge, error) {
	switch ch.Status {
	case stripe.ChargeStatusSucceeded:
		return toCharge(ch), nil
	case stripe.ChargeStatusFailed:
		return nil, &service.PaymentError{
			Class:      service.PaymentClassDecline,
			Kind:       service.PaymentDeclined,
			Code:       ch.FailureCode,
			Message:    ch.FailureMessage,
			HTTPStatus: statusOf(ch.LastResponse),
			Err:        errChargeNotSucceeded,
		}
	default:
		return nil, unavailable("charge "+ch.ID+" is "+string(ch.Status), statusOf(ch.LastResponse), errChargeNotSucceeded)
	}
}

func toCharge(ch *stripe.Charge) *service.Charge {
	c := &service.Charge{
		ID:          ch.ID,
		AmountCents: ch.Amount,
		Currency:    string(ch.Currency),
		Status:      string(ch.Status),
		Created:     unixTime(ch.Created),
		Tag:         tagOf(ch.Metadata),
		CustomerID:  customerIDOf(ch),
		PaymentID:   paymentIntentOf(ch),
	}
	if ch.Status == stripe.ChargeStatusSucceeded && !ch.Captured {
		// A hold took no money: authorized while it stands; released (its
		// whole amount shown as refunded) once cancelled or expired.
		c.Status = service.ChargeAuthorized
		if ch.Refunded {
			c.Status = service.ChargeCanceled
		}
	}
	return c
}

// paymentIntentOf is the id of the PaymentIntent ch belongs to, or "" for a
// Charges API charge.
func paymentIntentOf(ch *stripe.Charge) string {
	if ch.PaymentIntent == nil {
		return ""
	}
	return ch.PaymentIntent.ID
}

// customerIDOf is the id of the customer ch charged, or "".
func customerIDOf(ch *stripe.Charge) string {
	if ch.Customer == nil {
		return ""
	}
	return ch.Customer.ID
}

func statusOf(r *stripe.APIResponse) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}
