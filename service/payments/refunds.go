package payments

import (
	"context"
	"errors"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// RefundCreate refunds params.ChargeID in full with params.Tag as metadata, under
// params.IdempotencyKey. A refund Stripe accepts (succeeded or pending) is
// returned; one it answers as failed or canceled is a PaymentClassRefusal;
// any other status (requires_action) is PaymentClassUnavailable, to be
// settled by a retry or through RefundList.
func (c *Client) RefundCreate(ctx context.Context, params service.RefundCreateParams) (*service.Refund, error) {
	if err := checkKey(params.IdempotencyKey); err != nil {
		return nil, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	// A PaymentIntent's charge is refunded through its PaymentIntent; a
	// Charges API charge by itself.
	p := &stripe.RefundParams{Charge: stripe.String(params.ChargeID)}
	if params.PaymentID != "" {
		p = &stripe.RefundParams{PaymentIntent: stripe.String(params.PaymentID)}
	}
	p.Context = ctx
	p.SetIdempotencyKey(params.IdempotencyKey)
	tagMetadata(p.AddMetadata, params.Tag)
	r, err := c.refunds.New(p)
	if err != nil {
		return nil, translateError(err)
	}
	ref := toRefund(r, params.ChargeID)
	switch r.Status {
	case stripe.RefundStatusSucceeded, stripe.RefundStatusPending:
		return ref, nil
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		return nil, &service.PaymentError{
			Class:      service.PaymentClassRefusal,
			Kind:       service.PaymentInvalid,
			Code:       "refund_" + string(r.Status),
			Message:    "refund " + r.ID + " is " + string(r.Status),
			HTTPStatus: statusOf(r.LastResponse),
			Err:        errRefundNotAccepted,
		}
	default:
		return nil, unavailable("refund "+r.ID+" is "+string(r.Status), statusOf(r.LastResponse), errRefundNotAccepted)
	}
}

// RefundList returns every refund of chargeID, newest first, following
// Stripe's pages.
func (c *Client) RefundList(ctx context.Context, chargeID string) ([]*service.Refund, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.RefundListParams{Charge: stripe.String(chargeID)}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	p.AddExpand("data.charge") // what tells a release from a refund
	it := c.refunds.List(p)
	out := []*service.Refund{}
	for it.Next() {
		out = append(out, toRefund(it.Refund(), chargeID))
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	return out, nil
}

// RefundListSince returns every refund of the account created at or after
// since, following Stripe's pages.
func (c *Client) RefundListSince(ctx context.Context, since time.Time) ([]*service.Refund, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.RefundListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: since.Unix()}}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	p.AddExpand("data.charge")
	it := c.refunds.List(p)
	out := []*service.Refund{}
	for it.Next() {
		out = append(out, toRefund(it.Refund(), ""))
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	return out, nil
}

// errRefundNotAccepted underlies the error for a refund answered with a
// status other than succeeded or pending.
var errRefundNotAccepted = errors.New("payments: refund not accepted")

// toRefund maps a Stripe refund; chargeID stands in when the answer does
// not name the charge.
func toRefund(r *stripe.Refund, chargeID string) *service.Refund {
	if r.Charge != nil && r.Charge.ID != "" {
		chargeID = r.Charge.ID
	}
	return &service.Refund{
		ID:          r.ID,
		ChargeID:    chargeID,
		AmountCents: r.Amount,
		Status:      string(r.Status),
		Created:     unixTime(r.Created),
		Tag:         tagOf(r.Metadata),
		Release:     isRelease(r),
	}
}

// isRelease reports whether r is Stripe's record of an authorization
// released, not a refund. Cancelling a PaymentIntent that requires capture
// "automatically refunds" what was capturable, and a hold that lapses is
// released the same way (reason expired_uncaptured_charge): each shows on
// the charge as a refund Stripe made itself. A refund of a charge never
// captured is therefore a release, and so is one of a partial capture's
// charge that is exactly its uncaptured rest. A refund the service made
// carries its tag and never is one. Whether the charge was captured is
// known only when it is expanded (RefundList, RefundListSince); a refund
// read without it (an event's object) is a release only by its reason.
func isRelease(r *stripe.Refund) bool {
	if tagOf(r.Metadata) != (service.Tag{}) {
		return false
	}
	if r.Reason == stripe.RefundReasonExpiredUncapturedCharge {
		return true
	}
	ch := r.Charge
	if ch == nil || ch.Object != "charge" {
		return false
	}
	if !ch.Captured {
		return true
	}
	rest := ch.Amount - ch.AmountCaptured
	return ch.PaymentIntent != nil && rest > 0 && r.Amount == rest
}
