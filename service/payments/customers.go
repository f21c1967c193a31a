package payments

import (
	"context"
	"errors"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// CustomerCreate creates the rider's customer with params.Source attached
// and params.Tag as metadata, under params.IdempotencyKey.
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
	tagMetadata(p.AddMetadata, params.Tag)
	cust, err := c.customers.New(p)
	if err != nil {
		return nil, sourceRefusal(err, translateError(err))
	}
	return &service.Customer{ID: cust.ID, Tag: tagOf(cust.Metadata)}, nil
}

// CustomerFind returns the customers made under the processor key key,
// found by searching metadata ar_key. Stripe's search index lags writes by
// up to about a minute.
func (c *Client) CustomerFind(ctx context.Context, key string) ([]*service.Customer, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.CustomerSearchParams{}
	p.Context = ctx
	p.Query = keyQuery(key)
	it := c.customers.Search(p)
	out := []*service.Customer{}
	for it.Next() {
		cust := it.Customer()
		out = append(out, &service.Customer{ID: cust.ID, Tag: tagOf(cust.Metadata)})
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	return out, nil
}

// sourceRefusal makes Stripe's refusal of the rider's source when the
// customer is created — a source Stripe does not know (resource_missing on
// the parameter source) or a card declined when attached — the rider's
// outcome: a PaymentClassRefusal with Code service.PaymentCodeSourceRefused,
// recorded as the rider's registration state at Stripe. Every other error
// is translated as usual.
func sourceRefusal(raw, translated error) error {
	var se *stripe.Error
	pe, ok := translated.(*service.PaymentError)
	if !ok || !errors.As(raw, &se) {
		return translated
	}
	if (se.Param == "source" && se.Code == stripe.ErrorCodeResourceMissing && se.HTTPStatusCode < 500) ||
		pe.Class == service.PaymentClassDecline {
		pe.Class, pe.Kind, pe.Code = service.PaymentClassRefusal, service.PaymentInvalid, service.PaymentCodeSourceRefused
	}
	return pe
}
