package fakestripe

import (
	"encoding/json"
	"net/http"
)

// Stripe error types, as found in the "type" field of an error body.
const (
	typeAPI            = "api_error"
	typeCard           = "card_error"
	typeIdempotency    = "idempotency_error"
	typeInvalidRequest = "invalid_request_error"
)

// response is what an operation answers: a status and a JSON body.
type response struct {
	status int
	body   []byte
	// executed reports whether the operation started executing. Only then is
	// the response saved under the request's idempotency key; validation
	// failures are not, so a corrected request may reuse the key.
	executed bool
}

// apiError is the body of a Stripe error, {"error": {...}}.
type apiError struct {
	Type        string `json:"type"`
	Code        string `json:"code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message"`
	Param       string `json:"param,omitempty"`
	Charge      string `json:"charge,omitempty"`
	DocURL      string `json:"doc_url,omitempty"`
	// PaymentIntent is the PaymentIntent an error of a PaymentIntent
	// operation is about, as it is after the request; PaymentMethod the
	// payment method that failed.
	PaymentIntent *paymentIntentObject `json:"payment_intent,omitempty"`
	PaymentMethod *paymentMethodObject `json:"payment_method,omitempty"`
}

// okResponse is a 200 with obj encoded as the body of an executed operation.
func okResponse(obj any) response {
	return response{status: http.StatusOK, body: encode(obj), executed: true}
}

// errorResponse is an error answer that was not the result of execution
// (authentication, routing, validation, idempotency conflicts, faults).
func errorResponse(status int, e apiError) response {
	return response{status: status, body: encode(map[string]apiError{"error": e})}
}

// executedError is an error answer produced by an operation that started
// executing, such as a decline; it is saved under the idempotency key.
func executedError(status int, e apiError) response {
	r := errorResponse(status, e)
	r.executed = true
	return r
}

// invalidParam is the 400 for a request parameter that failed validation.
func invalidParam(code, param, message string) response {
	return errorResponse(http.StatusBadRequest, apiError{
		Type: typeInvalidRequest, Code: code, Param: param, Message: message,
	})
}

// missingParam is the 400 for a required parameter that is absent.
func missingParam(param string) response {
	return invalidParam("parameter_missing", param, "Missing required param: "+param+".")
}

// noSuchObject is the error for an id that names no object. Retrievals
// answer 404; references inside a create answer 400, as Stripe does.
func noSuchObject(status int, kind, param, id string) response {
	return executedError(status, apiError{
		Type:    typeInvalidRequest,
		Code:    "resource_missing",
		Param:   param,
		Message: "No such " + kind + ": '" + id + "'",
		DocURL:  "https://stripe.com/docs/error-codes/resource-missing",
	})
}

func encode(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		// Every value encoded here is built from plain data types.
		panic("fakestripe: encoding response: " + err.Error())
	}
	return append(b, '\n')
}
