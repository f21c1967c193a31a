package payments

import (
	"context"
	"errors"
	"time"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// findMargin is how much earlier than the caller's Since a PaymentIntent is
// looked for: Stripe's clock and the database's differ.
const findMargin = 10 * time.Minute

// errIntentNotSucceeded underlies the error for a PaymentIntent answered in
// a state that is neither made, waiting for its rider, nor declined.
var errIntentNotSucceeded = errors.New("payments: payment intent did not succeed")

// intentCreate creates and confirms a PaymentIntent for params, with the
// rider present (on-session): the customer's saved card is charged, and
// when the card's bank asks for authentication the PaymentIntent comes
// back in requires_action with where to send the rider. A declined card is
// a PaymentClassDecline error.
func (c *Client) intentCreate(ctx context.Context, params service.ChargeCreateParams) (*service.Charge, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.PaymentIntentParams{
		Amount:             stripe.Int64(params.AmountCents),
		Currency:           stripe.String(params.Currency),
		Customer:           stripe.String(params.CustomerID),
		Confirm:            stripe.Bool(true),
		PaymentMethodTypes: []*string{stripe.String("card")},
	}
	p.Context = ctx
	p.SetIdempotencyKey(params.IdempotencyKey)
	if params.Description != "" {
		p.Description = stripe.String(params.Description)
	}
	if params.ReturnURL != "" && !params.OffSession {
		p.ReturnURL = stripe.String(params.ReturnURL)
	}
	if params.OffSession {
		p.OffSession = stripe.Bool(true)
	}
	if params.ManualCapture {
		p.CaptureMethod = stripe.String(string(stripe.PaymentIntentCaptureMethodManual))
	}
	tagMetadata(p.AddMetadata, params.Tag)
	pi, err := c.intents.New(p)
	if err != nil {
		return nil, translateError(err)
	}
	ch := fromIntent(pi)
	switch ch.Status {
	case service.ChargeSucceeded, service.ChargeRequiresAction, service.ChargeAuthorized:
		return ch, nil
	case service.ChargeFailed:
		return nil, &service.PaymentError{
			Class: service.PaymentClassDecline, Kind: service.PaymentDeclined,
			Code: ch.FailureCode, Message: ch.FailureMessage, HTTPStatus: statusOf(pi.LastResponse),
			Err: errIntentNotSucceeded,
		}
	}
	return nil, unavailable("payment intent "+pi.ID+" is "+string(pi.Status), statusOf(pi.LastResponse), errIntentNotSucceeded)
}

// intentFind returns the customer's PaymentIntents made under the key
// params.Key, whatever their status, found by listing the customer's
// PaymentIntents created since params.Since (less a margin): a list sees a
// PaymentIntent as soon as it is made, unlike a search.
func (c *Client) intentFind(ctx context.Context, params service.ChargeFindParams) ([]*service.Charge, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.PaymentIntentListParams{Customer: stripe.String(params.CustomerID)}
	if !params.Since.IsZero() {
		p.CreatedRange = &stripe.RangeQueryParams{GreaterThanOrEqual: params.Since.Add(-findMargin).Unix()}
	}
	p.Context = ctx
	p.Limit = stripe.Int64(100)
	it := c.intents.List(p)
	out := []*service.Charge{}
	for it.Next() {
		if pi := it.PaymentIntent(); pi.Metadata[metadataKey] == params.Key {
			out = append(out, fromIntent(pi))
		}
	}
	if err := it.Err(); err != nil {
		return nil, translateError(err)
	}
	return out, nil
}

// PaymentGet returns the PaymentIntent id's state, or (nil, nil) when
// Stripe answers 404.
func (c *Client) PaymentGet(ctx context.Context, id string) (*service.Charge, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.PaymentIntentParams{}
	p.Context = ctx
	pi, err := c.intents.Get(id, p)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, translateError(err)
	}
	return fromIntent(pi), nil
}

// PaymentCancel cancels the PaymentIntent params.PaymentID as abandoned,
// under params.IdempotencyKey. One that can no longer be cancelled is a
// PaymentClassRefusal with Code service.PaymentCodeUnexpectedState.
func (c *Client) PaymentCancel(ctx context.Context, params service.PaymentCancelParams) (*service.Charge, error) {
	if err := checkKey(params.IdempotencyKey); err != nil {
		return nil, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.PaymentIntentCancelParams{CancellationReason: stripe.String(string(stripe.PaymentIntentCancellationReasonAbandoned))}
	if params.Hold {
		p.CancellationReason = stripe.String(string(stripe.PaymentIntentCancellationReasonRequestedByCustomer))
	}
	p.Context = ctx
	p.SetIdempotencyKey(params.IdempotencyKey)
	pi, err := c.intents.Cancel(params.PaymentID, p)
	if err != nil {
		return nil, translateError(err)
	}
	return fromIntent(pi), nil
}

// PaymentCapture captures params.AmountCents of the PaymentIntent
// params.PaymentID, held with capture_method manual, under
// params.IdempotencyKey; Stripe releases the rest. One that can no longer be
// captured is a PaymentClassRefusal with Code
// service.PaymentCodeUnexpectedState.
func (c *Client) PaymentCapture(ctx context.Context, params service.PaymentCaptureParams) (*service.Charge, error) {
	if err := checkKey(params.IdempotencyKey); err != nil {
		return nil, err
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	p := &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(params.AmountCents)}
	p.Context = ctx
	p.SetIdempotencyKey(params.IdempotencyKey)
	pi, err := c.intents.Capture(params.PaymentID, p)
	if err != nil {
		return nil, translateError(err)
	}
	ch := fromIntent(pi)
	if ch.Status != service.ChargeSucceeded {
		return nil, unavailable("payment intent "+pi.ID+" is "+string(pi.Status)+" after its capture", statusOf(pi.LastResponse), errIntentNotSucceeded)
	}
	return ch, nil
}

// PaymentDetails is Adyen's: a PaymentIntent needs nothing from the
// rider's return, its state is read with PaymentGet.
func (c *Client) PaymentDetails(context.Context, service.PaymentDetailsParams) (*service.Charge, error) {
	return nil, &service.PaymentError{
		Class: service.PaymentClassUnavailable, Kind: service.PaymentUnavailable,
		Code: service.PaymentCodeUnsupported, Message: "stripe: payment details are not submitted",
	}
}

// fromIntent is a PaymentIntent as the service sees a payment: its state
// as one of the Charge statuses, its charge (latest_charge) once made.
func fromIntent(pi *stripe.PaymentIntent) *service.Charge {
	ch := &service.Charge{
		PaymentID:   pi.ID,
		AmountCents: pi.Amount,
		Currency:    string(pi.Currency),
		Created:     unixTime(pi.Created),
		Tag:         tagOf(pi.Metadata),
		Status:      service.ChargeProcessing,
	}
	if pi.LatestCharge != nil {
		ch.ID = pi.LatestCharge.ID
	}
	if pi.Customer != nil {
		ch.CustomerID = pi.Customer.ID
	}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		ch.Status, ch.CapturedCents = service.ChargeSucceeded, pi.AmountReceived
	case stripe.PaymentIntentStatusRequiresCapture:
		ch.Status = service.ChargeAuthorized
	case stripe.PaymentIntentStatusRequiresAction:
		ch.Status = service.ChargeRequiresAction
		ch.Action = &service.PaymentAction{Type: "redirect_to_url", ClientSecret: pi.ClientSecret}
		if na := pi.NextAction; na != nil && na.RedirectToURL != nil {
			ch.Action.URL = na.RedirectToURL.URL
		}
	case stripe.PaymentIntentStatusCanceled:
		ch.Status = service.ChargeCanceled
	case stripe.PaymentIntentStatusRequiresPaymentMethod:
		// Confirmed and failed: the error says why. Never confirmed (no
		// error) is still to be decided.
		if e := pi.LastPaymentError; e != nil {
			ch.Status, ch.FailureCode, ch.FailureMessage = service.ChargeFailed, failureCode(e), e.Msg
		}
	}
	return ch
}

// failureCode is the most precise code of a payment error: the bank's
// decline code, else Stripe's error code.
func failureCode(e *stripe.Error) string {
	if e.DeclineCode != "" {
		return string(e.DeclineCode)
	}
	if e.Code != "" {
		return string(e.Code)
	}
	return "payment_failed"
}
