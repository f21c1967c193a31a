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
	// CustomerFind returns the customers made under the processor key
	// (metadata ar_key), each with its tag. The caller checks whose they
	// are.
	CustomerFind(ctx context.Context, key string) ([]*Customer, error)
	// ChargeCreate charges a customer.
	ChargeCreate(ctx context.Context, params ChargeCreateParams) (*Charge, error)
	// ChargeFind returns the payments made under the processor key
	// (metadata ar_key), each with its tag: on the Charges API the
	// succeeded charges; on the payments API every payment, whatever its
	// status (a Charge with PaymentID set). The caller checks whose they
	// are.
	ChargeFind(ctx context.Context, params ChargeFindParams) ([]*Charge, error)
	// PaymentGet returns a payment's current state (Status one of the
	// Charge statuses), or (nil, nil) when the processor has no payment of
	// that id. A processor whose API reads no payments answers
	// PaymentCodeUnsupported.
	PaymentGet(ctx context.Context, paymentID string) (*Charge, error)
	// PaymentCancel cancels a payment that waits for its rider. Stripe
	// answers the cancelled payment (ChargeCanceled), or a
	// PaymentClassRefusal with Code PaymentCodeUnexpectedState when the
	// payment can no longer be cancelled (it succeeded, or failed); Adyen
	// takes the cancel on (ChargeCancelRequested) and tells its outcome in
	// a notification.
	PaymentCancel(ctx context.Context, params PaymentCancelParams) (*Charge, error)
	// PaymentDetails submits what the rider's return from an
	// authentication carried (Adyen's redirectResult) and returns the
	// payment's outcome. A processor that needs none answers
	// PaymentCodeUnsupported.
	PaymentDetails(ctx context.Context, params PaymentDetailsParams) (*Charge, error)
	// PaymentCapture captures params.AmountCents of an authorized payment
	// (a hold) under params.IdempotencyKey; the rest of the hold is
	// released. Stripe captures at once (ChargeSucceeded, CapturedCents
	// set); Adyen takes the capture on (ChargeCaptureRequested, ID the
	// capture's reference) and tells its outcome in a notification. A
	// payment that can no longer be captured (captured already, cancelled,
	// expired) is a PaymentClassRefusal with Code
	// PaymentCodeUnexpectedState.
	PaymentCapture(ctx context.Context, params PaymentCaptureParams) (*Charge, error)
	// ChargeGet returns one charge, or (nil, nil) when the processor has no
	// charge of that id.
	ChargeGet(ctx context.Context, id string) (*Charge, error)
	// ChargeListSince returns every charge of the account created at or
	// after since, whatever its status, with its tag.
	ChargeListSince(ctx context.Context, since time.Time) ([]*Charge, error)
	// RefundCreate refunds a charge in full. A refund the processor accepts
	// (succeeded, or pending settlement) is returned; one it answers as
	// failed or canceled is a PaymentClassRefusal, and a charge with nothing
	// left to refund is a PaymentClassRefusal with Code
	// RefundCodeChargeAlreadyRefunded.
	RefundCreate(ctx context.Context, params RefundCreateParams) (*Refund, error)
	// RefundList returns every refund of a charge, newest first, whatever
	// its status. Unlike a search it sees a refund as soon as it is made.
	RefundList(ctx context.Context, chargeID string) ([]*Refund, error)
	// RefundListSince returns every refund of the account created at or
	// after since, whatever its status, with its tag.
	RefundListSince(ctx context.Context, since time.Time) ([]*Refund, error)
	// Budget is the longest a single call may take, its retries included.
	// Leases on idempotency keys are longer than this.
	Budget() time.Duration
}

// ProcessorKeyWindow is how long the processor remembers an idempotency key
// (Stripe: 24 hours). A call older than this, less a margin, cannot rely on
// the processor to deduplicate it.
const ProcessorKeyWindow = 24 * time.Hour

// Tag is what the service writes as metadata on every object it makes at
// the processor, so that it can recognise the object as its own: the
// deployment's namespace (ar_ns), the rider (ar_rider, a digest of the
// namespace and the rider's email) and the processor idempotency key the
// object was made under (ar_key). Every field is a pure function of the
// durable client request, never of an id our database hands out.
type Tag struct {
	Namespace string
	Rider     string
	Key       string
}

// CustomerCreateParams are the inputs of Payments.CustomerCreate.
type CustomerCreateParams struct {
	// IdempotencyKey is the entity-level key of the rider's customer,
	// derived from the namespace and the rider's email.
	IdempotencyKey string
	Email          string
	// Source is a payment source or test token, e.g. "tok_visa".
	Source string
	Tag    Tag
}

// Customer is the processor's customer.
type Customer struct {
	ID  string
	Tag Tag
}

// ChargeCreateParams are the inputs of Payments.ChargeCreate.
type ChargeCreateParams struct {
	// IdempotencyKey is derived from the namespace, the rider and the
	// client's idempotency key.
	IdempotencyKey string
	CustomerID     string
	AmountCents    int64
	// Currency is a lower-case ISO 4217 code.
	Currency    string
	Description string
	// Tag is stored as the charge's metadata so that the charge can be
	// found again after the processor has forgotten the key.
	Tag Tag
	// API is the API the ride's charge goes to (PaymentAPICharges when
	// empty).
	API PaymentAPI
	// ReturnURL is where the rider comes back after authenticating, on
	// PaymentAPIIntents: a pure function of the request.
	ReturnURL string
	// ManualCapture asks for a hold: the payment is authorized
	// (ChargeAuthorized) and captured later with PaymentCapture.
	ManualCapture bool
	// OffSession charges the customer's saved card without the rider (a
	// fare above the hold, after the trip): a bank that asks for
	// authentication declines it (Code "authentication_required").
	OffSession bool
}

// PaymentCaptureParams are the inputs of Payments.PaymentCapture.
type PaymentCaptureParams struct {
	// IdempotencyKey is derived from the payment's processor key.
	IdempotencyKey string
	// PaymentID is the authorized payment (a Stripe PaymentIntent, an
	// Adyen pspReference).
	PaymentID string
	// Reference is the processor key the payment was requested under.
	Reference   string
	AmountCents int64
	Currency    string
}

// Charge statuses at the processor, as in Stripe's Charge.status, and the
// states of a payment that may wait for its rider.
const (
	// ChargeSucceeded: the payment is made; the Charge's ID is its charge.
	ChargeSucceeded = "succeeded"
	// ChargeRequiresAction: the rider's bank asks the rider to
	// authenticate the payment; Action says how.
	ChargeRequiresAction = "requires_action"
	// ChargeProcessing: the payment is being decided.
	ChargeProcessing = "processing"
	// ChargeFailed: the payment was declined or its authentication failed;
	// FailureCode and FailureMessage say why.
	ChargeFailed = "failed"
	// ChargeCanceled: the payment was cancelled before it was made.
	ChargeCanceled = "canceled"
	// ChargeCancelRequested: the processor took a cancel on and tells its
	// outcome later (Adyen).
	ChargeCancelRequested = "cancel_requested"
	// ChargeCancelFailed: the processor refused a cancel it had taken on
	// (Adyen's CANCELLATION or TECHNICAL_CANCEL with success false): the
	// payment is as it was; FailureMessage says why.
	ChargeCancelFailed = "cancel_failed"
	// ChargeAuthorized: the payment is a hold, authorized and not
	// captured (Stripe's requires_capture); the Charge's ID is its charge.
	ChargeAuthorized = "authorized"
	// ChargeCaptureRequested: the processor took a capture on and tells
	// its outcome later (Adyen); the Charge's ID is the capture's
	// reference.
	ChargeCaptureRequested = "capture_requested"
)

// PaymentAPI is the processor API a ride's charge request goes to,
// committed with the ride before any call, so that every continuation
// sends the same request to the same API.
type PaymentAPI string

const (
	// PaymentAPICharges: Stripe's Charges API, and at Adyen a
	// merchant-initiated payment of the stored card. The API of rides
	// booked before PaymentAPIIntents; nothing asks a rider to
	// authenticate.
	PaymentAPICharges PaymentAPI = "charges"
	// PaymentAPIIntents: Stripe's PaymentIntents, confirmed with the rider
	// present, and at Adyen a shopper-present payment with a return URL:
	// the rider's bank may ask the rider to authenticate.
	PaymentAPIIntents PaymentAPI = "payment_intents"
)

// PaymentAction is what a rider must do before the processor decides a
// payment: authenticate with their bank at URL (Stripe's
// next_action.redirect_to_url, Adyen's redirect action), or, in a Stripe
// SDK, with the PaymentIntent's ClientSecret.
type PaymentAction struct {
	// Type is "redirect_to_url".
	Type         string
	URL          string
	ClientSecret string
}

// ChargeFindParams are the inputs of Payments.ChargeFind.
type ChargeFindParams struct {
	// Key is the processor key the payment was requested under.
	Key string
	// API is the API the payment was requested on.
	API PaymentAPI
	// CustomerID is the customer charged: Stripe's PaymentIntents are
	// found by listing the customer's (never by search, which lags).
	CustomerID string
	// Since bounds the listing: the payment was requested no earlier.
	Since time.Time
}

// PaymentCancelParams are the inputs of Payments.PaymentCancel.
type PaymentCancelParams struct {
	// IdempotencyKey is derived from the payment's processor key.
	IdempotencyKey string
	// PaymentID is the payment, when the processor told it (Stripe's
	// PaymentIntent).
	PaymentID string
	// Reference is the processor key the payment was requested under
	// (Adyen cancels by the merchant reference).
	Reference string
	// Hold: the payment is an authorized hold released at the rider's or
	// the dispatch side's request, not a payment abandoned by its rider.
	// At Adyen a hold is cancelled by its pspReference.
	Hold bool
}

// PaymentDetailsParams are the inputs of Payments.PaymentDetails.
type PaymentDetailsParams struct {
	// IdempotencyKey is derived from the payment's processor key and the
	// redirect result.
	IdempotencyKey string
	// RedirectResult is what the processor appended to the rider's return
	// URL.
	RedirectResult string
}

// Charge is a charge at the processor.
type Charge struct {
	ID          string
	AmountCents int64
	Currency    string
	// Status is the processor's; ChargeCreate and ChargeFind return
	// succeeded charges only.
	Status  string
	Created time.Time
	Tag     Tag
	// CustomerID is the customer charged ("" when the processor did not
	// say).
	CustomerID string
	// PaymentID is the payment the charge belongs to (a Stripe
	// PaymentIntent, an Adyen pspReference); "" for a Charges API charge.
	PaymentID string
	// Action is what the rider must do, while Status is
	// ChargeRequiresAction.
	Action *PaymentAction
	// FailureCode and FailureMessage say why, while Status is
	// ChargeFailed.
	FailureCode    string
	FailureMessage string
	// CapturedCents is what the processor captured of the payment (its
	// amount once made; part of a hold once captured); 0 while nothing is.
	CapturedCents int64
}

// RefundCreateParams are the inputs of Payments.RefundCreate.
type RefundCreateParams struct {
	// IdempotencyKey is derived from the namespace, the charge and the
	// refund's attempt.
	IdempotencyKey string
	ChargeID       string
	// PaymentID is the charge's payment when it has one (a Stripe
	// PaymentIntent, refunded by it).
	PaymentID string
	// AmountCents and Currency are the charge's (a full refund); Stripe
	// refunds the whole charge without them, Adyen needs them.
	AmountCents int64
	Currency    string
	Tag         Tag
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
	Status  string
	Created time.Time
	Tag     Tag
	// Release is set on what the processor shows as a refund but is the
	// release of an authorization that took no money: Stripe's refund of a
	// hold cancelled or lapsed uncaptured, or of a partial capture's
	// uncaptured rest. It is never a ride's refund, nor an orphan's, nor
	// anything reconciliation or settlement matching counts as one.
	Release bool
}

// Accepted reports whether the processor took the refund on: the money
// is returned or on its way back. A release (Release) returns no money
// and is never accepted as a refund.
func (r *Refund) Accepted() bool {
	return !r.Release && (r.Status == RefundSucceeded || r.Status == RefundPending)
}

// PaymentClass is what a processor failure means: whose outcome it is, and
// whether the operation may have taken effect. It is the one classification
// of processor failures; the adapter sets it on every *PaymentError, and the
// flows, the customer creation and the jobs ask PaymentClassOf or
// PaymentFinal instead of reading the processor's codes. Only a decline and
// a refusal are the rider's outcome.
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
	// that the account does not know (resource_missing: a test key against
	// live data, a customer deleted in the dashboard), an idempotency key
	// sent with other parameters. It is never the rider's outcome: it is
	// indeterminate (Kind PaymentUnavailable), nothing is stored, it is
	// logged and counted (atomicrides_stripe_config_errors_total), and once
	// an operator fixes the configuration the request is retried with the
	// same key.
	PaymentClassConfiguration PaymentClass = "configuration"
	// PaymentClassUnavailable: no answer (a timeout, a connection error, a
	// 5xx, a 429, a 409 for a key in use). The operation may or may not have
	// taken effect; retrying with the same key is safe.
	PaymentClassUnavailable PaymentClass = "unavailable"
)

// PaymentErrorKind is how the engine treats a processor failure: as a
// definitive answer, stored on the key and replayed, or as indeterminate.
// It follows from the PaymentClass.
type PaymentErrorKind string

const (
	// PaymentDeclined is definitive: the card was declined. Retrying with
	// the same source will not succeed. Always PaymentClassDecline.
	PaymentDeclined PaymentErrorKind = "declined"
	// PaymentInvalid is definitive: the processor refused the request
	// itself. Always PaymentClassRefusal.
	PaymentInvalid PaymentErrorKind = "invalid"
	// PaymentUnavailable is indeterminate: the call may or may not have
	// taken effect, or the service's configuration must be fixed first;
	// retrying with the same key is safe (PaymentClassUnavailable and
	// PaymentClassConfiguration).
	PaymentUnavailable PaymentErrorKind = "unavailable"
)

// PaymentCodeIdempotencyMismatch is the Code of the
// PaymentClassConfiguration error for an idempotency key the processor saw
// with other parameters.
const PaymentCodeIdempotencyMismatch = "idempotency_error"

// PaymentCodeSourceRefused is the Code of the PaymentClassRefusal of
// CustomerCreate when the processor refuses the rider's payment source
// (unknown, invalid, or declined when stored). It is the rider's
// registration state at that processor, never a configuration error.
const PaymentCodeSourceRefused = "payment_source_refused"

// PaymentCodeUnexpectedState is the Code of the PaymentClassRefusal of an
// operation on a payment in a state that does not allow it (Stripe's
// payment_intent_unexpected_state): cancelling a payment that succeeded.
const PaymentCodeUnexpectedState = "payment_intent_unexpected_state"

// PaymentCodeUnsupported is the Code of the PaymentClassUnavailable error
// of an operation the processor's API does not offer (Adyen's Checkout API
// has no search or list of payments).
const PaymentCodeUnsupported = "unsupported"

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

// paymentKindOf returns how the engine treats err: PaymentUnavailable when
// err is not a *PaymentError (an unknown failure is never taken as an answer).
func paymentKindOf(err error) PaymentErrorKind {
	var pe *PaymentError
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return PaymentUnavailable
}

// PaymentFinal returns the processor's failure in err when it is a
// definitive answer to the request — a decline or a refusal, recorded,
// stored on the key and replayed, never retried — and nil for every other
// error: indeterminate and configuration-class processor failures and the
// service's own errors alike.
func PaymentFinal(err error) *PaymentError {
	var pe *PaymentError
	if errors.As(err, &pe) && (pe.Class == PaymentClassDecline || pe.Class == PaymentClassRefusal) {
		return pe
	}
	return nil
}
