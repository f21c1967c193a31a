package openapi

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

// statusOf is the one table from domain error codes to HTTP statuses.
var statusOf = map[service.Code]int{
	service.CodeInvalid:              http.StatusUnprocessableEntity,
	service.CodeBadRequest:           http.StatusBadRequest,
	service.CodeUnauthenticated:      http.StatusUnauthorized,
	service.CodeNotFound:             http.StatusNotFound,
	service.CodeNotRefundable:        http.StatusConflict,
	service.CodeKeyInUse:             http.StatusConflict,
	service.CodeKeyReused:            http.StatusUnprocessableEntity,
	service.CodeProcessorUnavailable: http.StatusServiceUnavailable,
	service.CodeInternal:             http.StatusInternalServerError,
}

// problemTypeOf names the problem type of codes whose status alone is
// ambiguous.
var problemTypeOf = map[service.Code]string{
	service.CodeKeyInUse:             service.ProblemKeyInUse,
	service.CodeKeyReused:            service.ProblemKeyReused,
	service.CodeProcessorUnavailable: service.ProblemProcessorDown,
	service.CodeNotRefundable:        service.ProblemRideNotRefundable,
}

// toHTTP translates a domain error into the problem+json error Huma writes.
// Internal causes are logged by the caller and never shown.
func toHTTP(err error) error {
	var e *service.Error
	if !errors.As(err, &e) {
		e = &service.Error{Code: service.CodeInternal, Message: "internal error"}
	}
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	model := &huma.ErrorModel{
		Type:   problemTypeOf[e.Code],
		Title:  http.StatusText(status),
		Status: status,
		Detail: e.Message,
	}
	if e.Field != "" {
		model.Errors = []*huma.ErrorDetail{{Message: e.Message, Location: e.Field}}
	}
	if e.Code == service.CodeBadRequest && e.Field == "header.Idempotency-Key" {
		model.Type = service.ProblemInvalidKeyHeader
	}
	if e.RetryAfter > 0 {
		secs := int((e.RetryAfter + 999_999_999) / 1_000_000_000)
		return huma.ErrorWithHeaders(model, http.Header{"Retry-After": {strconv.Itoa(secs)}})
	}
	return model
}

func init() {
	base := huma.NewError
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		return headersAreBadRequests(base(status, msg, errs...), status)
	}
}

// headersAreBadRequests adjusts Huma's errors: Huma reports a missing or
// malformed header as 422; the contract says 400 for headers, so an error
// whose every detail is about a header becomes a 400. Everything else is
// Huma's problem+json unchanged.
func headersAreBadRequests(model huma.StatusError, status int) huma.StatusError {
	em, ok := model.(*huma.ErrorModel)
	if !ok || status != http.StatusUnprocessableEntity || len(em.Errors) == 0 {
		return model
	}
	for _, d := range em.Errors {
		if d == nil || !strings.HasPrefix(d.Location, "header.") {
			return model
		}
	}
	em.Status, em.Title = http.StatusBadRequest, http.StatusText(http.StatusBadRequest)
	return em
}
