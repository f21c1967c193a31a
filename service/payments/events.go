package payments

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

var _ service.EventLister = (*Client)(nil)

// EventListSince returns every event of the account created at or after
// since (Stripe keeps 30 days of them), oldest first, each as the JSON of
// an event: what the webhook endpoint would have been sent.
func (c *Client) EventListSince(ctx context.Context, since time.Time) ([]json.RawMessage, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.EventListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	it := c.events.List(p)
	out := []json.RawMessage{}
	for it.Next() {
		b, err := json.Marshal(it.Event())
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	slices.Reverse(out) // listed newest first
	return out, nil
}
