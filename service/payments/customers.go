package payments

import (
	"context"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// CustomerCreate creates the user's customer with params.Source attached
// and metadata user_id, under params.IdempotencyKey.
func (c *Client) CustomerCreate(ctx context.Context, params service.CustomerCreateParams) (*service.Customer, error) {
	if err := checkKey(params.IdempotencyKey); err != nil {
		return nil, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.CustomerParams{}
	p.Context = ctx
	p.SetIdempotencyKey(params.IdempotencyKey)
	if params.Email != "" {
		p.Email = stripe.String(params.Email)
	}
	if params.Source != "" {
		p.Source = stripe.String(params.Source)
	}
	p.AddMetadata(metadataUserID, formatID(params.UserID))
	cust, err := c.customers.New(p)
	if err != nil {
		return nil, translateError(err)
	}
	return &service.Customer{ID: cust.ID}, nil
}

// CustomerFind returns the user's customer, found by searching metadata
// user_id, or (nil, nil) when there is none. Should Stripe hold several,
// the one it lists first is returned. Stripe's search index lags writes by
// up to about a minute.
func (c *Client) CustomerFind(ctx context.Context, userID int64) (*service.Customer, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.CustomerSearchParams{}
	p.Context = ctx
	p.Query = metadataQuery(metadataUserID, userID)
	p.Single = true
	it := c.customers.Search(p)
	if it.Next() {
		return &service.Customer{ID: it.Customer().ID}, nil
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	return nil, nil
}
