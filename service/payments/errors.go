package payments

import (
	"errors"
	"net/http"

	"github.com/stripe/stripe-go/v76"

	"github.com/atomicrides/atomicrides/service"
)

// translateError turns any error from stripe-go into a
// *service.PaymentError, wrapping the original. It is the only place that
// reads Stripe's error types, codes and statuses; it sets the failure's
// service.PaymentClass and the engine's treatment of it:
//
//   - 401 and 403 (the secret key is refused or lacks a permission),
//     idempotency_error (a key sent with other parameters) and
//     resource_missing (every object a request names — the customer, the
//     charge — is one the service created, so the account not knowing it
//     is our configuration: a test key against live data, a customer
//     deleted in the dashboard) are configuration errors: never the
//     rider's outcome, indeterminate, retried once an operator acts;
//   - 409 (idempotency key in use, lock), 429, 5xx and api_error are
//     unavailable: the request may or may not have taken effect, and
//     retrying with the same key is safe;
//   - card_error is a decline, final;
//   - any other invalid_request_error is a refusal, final;
//   - anything that is not a Stripe error (timeouts, connection resets,
//     EOF, context cancellation, undecodable answers) is unavailable, as is
//     an error of a type Stripe has not documented.
func translateError(err error) error {
	if err == nil {
		return nil
	}
	var se *stripe.Error
	if !errors.As(err, &se) {
		return unavailable(err.Error(), 0, err)
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
		pe.Class, pe.Kind = service.PaymentClassConfiguration, service.PaymentUnavailable
	case se.Type == stripe.ErrorTypeIdempotency:
		pe.Class, pe.Kind = service.PaymentClassConfiguration, service.PaymentUnavailable
		if pe.Code == "" {
			pe.Code = service.PaymentCodeIdempotencyMismatch
		}
	case status == http.StatusConflict,
		status == http.StatusTooManyRequests,
		status >= http.StatusInternalServerError,
		se.Type == stripe.ErrorTypeAPI:
		pe.Class, pe.Kind = service.PaymentClassUnavailable, service.PaymentUnavailable
	case se.Type == stripe.ErrorTypeCard:
		pe.Class, pe.Kind = service.PaymentClassDecline, service.PaymentDeclined
	case se.Type == stripe.ErrorTypeInvalidRequest:
		pe.Class, pe.Kind = service.PaymentClassRefusal, service.PaymentInvalid
	default:
		pe.Class, pe.Kind = service.PaymentClassUnavailable, service.PaymentUnavailable
	}
	return pe
}

// unavailable is the error of a call whose effect is unknown.
func unavailable(message string, status int, err error) *service.PaymentError {
	return &service.PaymentError{
		Class:      service.PaymentClassUnavailable,
		Kind:       service.PaymentUnavailable,
		Message:    message,
		HTTPStatus: status,
		Err:        err,
	}
}
