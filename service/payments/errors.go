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
//   - 409 (idempotency key in use, lock), 429, 5xx, api_error and
//     idempotency_error are PaymentUnavailable: the request may or may not
//     have taken effect, and retrying with the same key is safe;
//   - card_error is PaymentDeclined;
//   - any other invalid_request_error is PaymentInvalid;
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
	case status == http.StatusConflict,
		status == http.StatusTooManyRequests,
		// A rejected secret key is our configuration, not the rider's
		// request: an operator fixes it and the request is retried.
		status == http.StatusUnauthorized,
		status == http.StatusForbidden,
		status >= http.StatusInternalServerError,
		se.Type == stripe.ErrorTypeAPI,
		se.Type == stripe.ErrorTypeIdempotency:
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
