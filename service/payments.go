package service

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Payments is the port to the payment processor. The adapter over stripe-go
// (package payments) is the production implementation; every call carries an
// explicit idempotency key and is bounded in time by the adapter.
//
// Implementations return a *PaymentError for every failure, with its
// PaymentClass and PaymentErrorKind set, so that the engine can tell a
// definitive answer from an indeterminate one (PaymentFinal).
type Payments interface {
	// CustomerCreate creates the customer of a user with a payment source.
	CustomerCreate(ctx context.Context, params CustomerCreateParams) (*Customer, error)
	// CustomerFind looks the user's customer up by metadata. It returns
	// (nil, nil) when the processor has none.
	CustomerFind(ctx context.Context, userID int64) (*Customer, error)
	// ChargeCreate charges a customer.
	ChargeCreate(ctx context.Context, params ChargeCreateParams) (*Charge, error)
	// ChargeFind looks the charge of a ride up by metadata. It returns
	// (nil, nil) when the processor has none.
	ChargeFind(ctx context.Context, rideID int64) (*Charge, error)
	// RefundCreate refunds a charge in full. A refund the processor accepts
	// (succeeded, or pending settlement) is returned; one it answers as
	// failed or canceled is a PaymentClassRefusal, and a charge with nothing
	// left to refund is a PaymentClassRefusal with Code
	// RefundCodeChargeAlreadyRefunded.
	RefundCreate(ctx context.Context, params RefundCreateParams) (*Refund, error)
	// RefundList returns every refund of a charge, newest first, whatever
	// its status. Unlike a search it sees a refund as soon as it is made.
	RefundList(ctx context.Context, chargeID string) ([]*Refund, error)
	// Budget is the longest a single call may take, its retries included.
	// Leases on idempotency keys are longer than this.
	Budget() time.Duration
}

// ProcessorKeyWindow is how long the processor remembers an idempotency key
// (Stripe: 24 hours). A call older than this, less a margin, cannot rely on
// the processor to deduplicate it.
const ProcessorKeyWindow = 24 * time.Hour

// CustomerCreateParams are the inputs of Payments.CustomerCreate.
type CustomerCreateParams struct {
	// IdempotencyKey is the entity-level key "user-<id>-customer".
	IdempotencyKey string
	UserID         int64
	Email          string
	// Source is a payment source or test token, e.g. "tok_visa".
	Source string
}

// Customer is the processor's customer.
type Customer struct {
	ID string
}

// ChargeCreateParams are the inputs of Payments.ChargeCreate.
type ChargeCreateParams struct {
	IdempotencyKey string
	CustomerID     string
	AmountCents    int64
	// Currency is a lower-case ISO 4217 code.
	Currency    string
	Description string
	// RideID is stored as the charge's metadata "ride_id" so that the charge
	// can be found again after the processor has forgotten the key.
	RideID int64
}

// Charge is a successful charge at the processor.
type Charge struct {
	ID          string
	AmountCents int64
	Currency    string
}

// RefundCreateParams are the inputs of Payments.RefundCreate.
type RefundCreateParams struct {
	// IdempotencyKey is the entity-level key "ride-<id>-refund".
	IdempotencyKey string
	ChargeID       string
	RideID         int64
}

// RefundCodeChargeAlreadyRefunded is the Code of the PaymentClassRefusal
// of RefundCreate for a charge with nothing left to refund: after the
// processor has forgotten an entity-level refund key, repeating the refund
// answers this instead of the refund it made.
const RefundCodeChargeAlreadyRefunded = "charge_already_refunded"

// Refund statuses at the processor, as in Stripe's Refund.status.
const (
	RefundSucceeded = "succeeded"
	RefundPending   = "pending"
)

// Refund is a refund at the processor.
type Refund struct {
	ID          string
	ChargeID    string
	AmountCents int64
	// Status is the processor's: RefundSucceeded, RefundPending, or
	// (listed refunds only) another such as "failed" or "canceled".
	Status string
	// RideID is the refund's metadata "ride_id", 0 when it has none.
	RideID int64
}

// Accepted reports whether the processor took the refund on: the money
// is returned or on its way back.
func (r *Refund) Accepted() bool { return r.Status == RefundSucceeded || r.Status == RefundPending }

// PaymentClass is what a processor failure means: whose outcome it is, and
// whether the operation may have taken effect. It is the one classification
// of processor failures; the adapter sets it on every *PaymentError, and the
// flows, the customer creation and the jobs ask PaymentClassOf or
// PaymentFinal instead of reading the processor's codes.
type PaymentClass string

const (
	// PaymentClassDecline: the rider's card was declined (a card error or a
	// failed charge). It is the rider's outcome, stored on the key.
	PaymentClassDecline PaymentClass = "decline"
	// PaymentClassRefusal: the processor refused the operation itself (an
	// invalid request, a refund answered as failed or canceled, a charge
	// already refunded). Stored on the key.
	PaymentClassRefusal PaymentClass = "refusal"
	// PaymentClassConfiguration: the processor refused how the service
	// called it — authentication, permission, an object the service created
	// that it does not know (resource_missing), an idempotency key reused
	// with other parameters, a call without a key. It is not the rider's
	// outcome. Its Kind says how it is treated: some are final
	// (PaymentInvalid), some retried (PaymentUnavailable).
	PaymentClassConfiguration PaymentClass = "configuration"
	// PaymentClassUnavailable: no answer (a timeout, a connection error, a
	// 5xx, a 429, a 409 for a key in use). The operation may or may not have
	// taken effect; retrying with the same key is safe.
	PaymentClassUnavailable PaymentClass = "unavailable"
)

// PaymentErrorKind is how the engine treats a processor failure: as a
// definitive answer, stored on the key and replayed, or as indeterminate.
// It is also the failure's outcome in metrics and audit records.
type PaymentErrorKind string

const (
	// PaymentDeclined is definitive: the card was declined. Retrying with
	// the same source will not succeed. Always PaymentClassDecline.
	PaymentDeclined PaymentErrorKind = "declined"
	// PaymentInvalid is definitive: the processor rejected the request
	// (PaymentClassRefusal, or a final PaymentClassConfiguration).
	PaymentInvalid PaymentErrorKind = "invalid"
	// PaymentUnavailable is indeterminate: the call may or may not have
	// taken effect; retrying with the same key is safe
	// (PaymentClassUnavailable, or a retried PaymentClassConfiguration).
	PaymentUnavailable PaymentErrorKind = "unavailable"
)

// PaymentError is the error every Payments implementation returns.
type PaymentError struct {
	// Class is what the failure means; see PaymentClass.
	Class PaymentClass
	// Kind is how the engine treats the failure; see PaymentErrorKind.
	Kind PaymentErrorKind
	// Code is the processor's error code, e.g. "card_declined", when known.
	Code string
	// Message is the processor's message, safe to show to the payer for
	// declines.
	Message string
	// HTTPStatus is the processor's HTTP status, 0 for network failures.
	HTTPStatus int
	// Err is the underlying error.
	Err error
}

func (e *PaymentError) Error() string {
	return fmt.Sprintf("payment %s (%s, status %d, code %q): %s", e.Kind, e.Class, e.HTTPStatus, e.Code, e.Message)
}

func (e *PaymentError) Unwrap() error { return e.Err }

// PaymentClassOf returns the class of any error from the processor:
// PaymentClassUnavailable when err is not a *PaymentError (an unknown
// failure is never taken as an answer).
func PaymentClassOf(err error) PaymentClass {
	var pe *PaymentError
	if errors.As(err, &pe) {
		return pe.Class
	}
	return PaymentClassUnavailable
}

// PaymentFinal returns the processor's failure in err when it is a
// definitive answer to the request — recorded, stored on the key and
// replayed, never retried — and nil for every other error: indeterminate
// processor failures and the service's own errors alike.
func PaymentFinal(err error) *PaymentError {
	var pe *PaymentError
	if errors.As(err, &pe) && (pe.Kind == PaymentDeclined || pe.Kind == PaymentInvalid) {
		return pe
	}
	return nil
}
