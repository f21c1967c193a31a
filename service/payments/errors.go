package payments

import (
	"errors"
	"net/http"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// translateError turns any error from stripe-go into a
// *service.PaymentError, wrapping the original. It is the only place that
// classifies processor failures:
//
//   - 401 and 403 (the secret key is refused or lacks a permission),
//     idempotency_error (a key sent with other parameters) and
//     resource_missing (every object a request names — the customer, the
//     charge — is one the service created, so the account not knowing it
//     is our configuration: a test key against live data, a customer
//     deleted in the dashboard) are PaymentConfiguration: never the
//     rider's outcome, retryable once an operator acts;
//   - 409 (idempotency key in use, lock), 429, 5xx and api_error are
//     PaymentUnavailable: the request may or may not have taken effect,
//     and retrying with the same key is safe;
//   - card_error is PaymentDeclined;
//   - any other invalid_request_error is PaymentInvalid (a refusal);
//   - anything that is not a Stripe error (timeouts, connection resets,
//     EOF, context cancellation, undecodable answers) is PaymentUnavailable,
//     as is an error of a type Stripe has not documented.
func translateError(err error) error {
	if err == nil {
		return nil
	}
	var se *stripe.Error
	if !errors.As(err, &se) {
		return &service.PaymentError{Kind: service.PaymentUnavailable, Message: err.Error(), Err: err}
	}
	pe := &service.PaymentError{
		Code:       string(se.Code),
		Message:    se.Msg,
		HTTPStatus: se.HTTPStatusCode,
		Err:        err,
	}
	switch status := se.HTTPStatusCode; {
	case status == http.StatusUnauthorized,
		status == http.StatusForbidden,
		se.Code == stripe.ErrorCodeResourceMissing && status < http.StatusInternalServerError:
		pe.Kind = service.PaymentConfiguration
	case se.Type == stripe.ErrorTypeIdempotency:
		pe.Kind = service.PaymentConfiguration
		if pe.Code == "" {
			pe.Code = service.PaymentCodeIdempotencyMismatch
		}
	case status == http.StatusConflict,
		status == http.StatusTooManyRequests,
		status >= http.StatusInternalServerError,
		se.Type == stripe.ErrorTypeAPI:
		pe.Kind = service.PaymentUnavailable
	case se.Type == stripe.ErrorTypeCard:
		pe.Kind = service.PaymentDeclined
	case se.Type == stripe.ErrorTypeInvalidRequest:
		pe.Kind = service.PaymentInvalid
	default:
		pe.Kind = service.PaymentUnavailable
	}
	return pe
}
