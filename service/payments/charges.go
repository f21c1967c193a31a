package payments

import (
	"context"
	"errors"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// ChargeCreate charges params.CustomerID with metadata ride_id, under
// params.IdempotencyKey. A declined card is a PaymentClassDecline error; a
// charge Stripe answers without error but not as succeeded (a pending
// charge) is PaymentClassUnavailable, to be settled later through ChargeFind.
func (c *Client) ChargeCreate(ctx context.Context, params service.ChargeCreateParams) (*service.Charge, error) {
	if err := checkKey(params.IdempotencyKey); err != nil {
		return nil, err
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
	p.AddMetadata(metadataRideID, formatID(params.RideID))
	ch, err := c.charges.New(p)
	if err != nil {
		return nil, translateError(err)
	}
	return succeeded(ch)
}

// ChargeFind returns the succeeded charge of the ride, found by searching
// metadata ride_id, or (nil, nil) when there is none; failed attempts
// carry the same metadata and are skipped. Stripe's search index lags
// writes by up to about a minute.
func (c *Client) ChargeFind(ctx context.Context, rideID int64) (*service.Charge, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.ChargeSearchParams{}
	p.Context = ctx
	p.Query = metadataQuery(metadataRideID, rideID)
	it := c.charges.Search(p)
	for it.Next() {
		if ch := it.Charge(); ch.Status == stripe.ChargeStatusSucceeded {
			return toCharge(ch), nil
		}
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	return nil, nil
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
	return &service.Charge{ID: ch.ID, AmountCents: ch.Amount, Currency: string(ch.Currency)}
}

func statusOf(r *stripe.APIResponse) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}
