package payments

import (
	"context"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// RefundCreate refunds params.ChargeID in full with metadata ride_id, under
// params.IdempotencyKey.
func (c *Client) RefundCreate(ctx context.Context, params service.RefundCreateParams) (*service.Refund, error) {
	if err := checkKey(params.IdempotencyKey); err != nil {
		return nil, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.RefundParams{Charge: stripe.String(params.ChargeID)}
	p.Context = ctx
	p.SetIdempotencyKey(params.IdempotencyKey)
	p.AddMetadata(metadataRideID, formatID(params.RideID))
	r, err := c.refunds.New(p)
	if err != nil {
		return nil, translateError(err)
	}
	chargeID := params.ChargeID
	if r.Charge != nil && r.Charge.ID != "" {
		chargeID = r.Charge.ID
	}
	return &service.Refund{ID: r.ID, ChargeID: chargeID, AmountCents: r.Amount, Status: string(r.Status)}, nil
}
