package openapi

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

// Problem types of the errors that are never stored on a key, as URI
// references relative to the service. The types of stored responses
// (service.ProblemCardDeclined, …) are the domain's.
const (
	// ProblemKeyInUse: another request holds the idempotency key (409).
	ProblemKeyInUse = "/problems/idempotency-key-in-use"
	// ProblemKeyReused: the idempotency key was first used with another
	// request (422).
	ProblemKeyReused = "/problems/idempotency-key-reused"
	// ProblemProcessorDown: the payment processor gave no definitive
	// answer (503).
	ProblemProcessorDown = "/problems/processor-unavailable"
	// ProblemInvalidKeyHeader: the Idempotency-Key header is malformed (400).
	ProblemInvalidKeyHeader = "/problems/invalid-idempotency-key"
	// ProblemRideNotRefundable: the ride has no charge to refund (409).
	ProblemRideNotRefundable = "/problems/ride-not-refundable"
)

// httpError is how a domain error code is answered over HTTP.
type httpError struct {
	status int
	// problemType names the problem type when the status alone is
	// ambiguous; empty means about:blank.
	problemType string
}

// httpErrors is the one table from domain error codes to HTTP. Every
// service.Codes() has an entry (TestEveryCodeHasAStatus).
var httpErrors = map[service.Code]httpError{
	service.CodeInvalid:              {status: http.StatusUnprocessableEntity},
	service.CodeKeyInvalid:           {status: http.StatusBadRequest, problemType: ProblemInvalidKeyHeader},
	service.CodeUnauthenticated:      {status: http.StatusUnauthorized},
	service.CodeNotFound:             {status: http.StatusNotFound},
	service.CodeNotRefundable:        {status: http.StatusConflict, problemType: ProblemRideNotRefundable},
	service.CodeKeyInUse:             {status: http.StatusConflict, problemType: ProblemKeyInUse},
	service.CodeKeyReused:            {status: http.StatusUnprocessableEntity, problemType: ProblemKeyReused},
	service.CodeProcessorUnavailable: {status: http.StatusServiceUnavailable, problemType: ProblemProcessorDown},
	service.CodeInternal:             {status: http.StatusInternalServerError},
	service.CodeEventRejected:        {status: http.StatusBadRequest, problemType: ProblemWebhookRejected},
	service.CodeEventTooLarge:        {status: http.StatusRequestEntityTooLarge},
	service.CodeNotCompletable:       {status: http.StatusConflict, problemType: ProblemRideNotCompletable},
	service.CodeNotCancellable:       {status: http.StatusConflict, problemType: ProblemRideNotCancellable},
	service.CodeBalanceDue:           {status: http.StatusPaymentRequired, problemType: ProblemBalanceDue},
	service.CodeNoBalanceDue:         {status: http.StatusConflict, problemType: ProblemNoBalanceDue},
}

// toHTTP translates a domain error, wrapped or not, into the problem+json
// error Huma writes. Internal causes are logged by the caller and never
// shown.
func toHTTP(err error) error {
	var e *service.Error
	if !errors.As(err, &e) {
		e = &service.Error{Code: service.CodeInternal, Message: "internal error"}
	}
	he, ok := httpErrors[e.Code]
	if !ok {
		he = httpErrors[service.CodeInternal]
	}
	model := &huma.ErrorModel{
		Type:   he.problemType,
		Title:  http.StatusText(he.status),
		Status: he.status,
		Detail: e.Message,
	}
	if e.Field != "" {
		model.Errors = []*huma.ErrorDetail{{Message: e.Message, Location: e.Field}}
	}
	if e.RideID != 0 {
		// The ride the problem is about.
		model.Instance = "/rides/" + strconv.FormatInt(e.RideID, 10)
	}
	if e.RetryAfter > 0 {
		secs := int((e.RetryAfter + time.Second - 1) / time.Second)
		return huma.ErrorWithHeaders(model, http.Header{"Retry-After": {strconv.Itoa(secs)}})
	}
	return model
}

func init() {
	base := huma.NewError
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		return headersAreBadRequests(onePerLocation(base(status, msg, errs...)), status)
	}
}

// onePerLocation merges the details Huma reports for one location (a
// string too short and not matching its pattern) into one, their distinct
// messages joined: an answer names each field at fault once, and says each
// thing once.
func onePerLocation(model huma.StatusError) huma.StatusError {
	var em *huma.ErrorModel
	if !errors.As(model, &em) || len(em.Errors) < 2 {
		return model
	}
	merged := em.Errors[:0:0]
	at := map[string]*huma.ErrorDetail{}
	for _, d := range em.Errors {
		if d == nil || d.Location == "" {
			merged = append(merged, d)
			continue
		}
		if first, ok := at[d.Location]; ok {
			if !slices.Contains(strings.Split(first.Message, "; "), d.Message) {
				first.Message += "; " + d.Message
			}
			continue
		}
		cp := *d
		at[d.Location] = &cp
		merged = append(merged, &cp)
	}
	em.Errors = merged
	return em
}

// headersAreBadRequests adjusts Huma's errors: Huma reports a missing or
// malformed header as 422; the contract says 400 for headers, so an error
// whose every detail is about a header becomes a 400. Everything else is
// Huma's problem+json unchanged.
func headersAreBadRequests(model huma.StatusError, status int) huma.StatusError {
	var em *huma.ErrorModel
	if !errors.As(model, &em) || status != http.StatusUnprocessableEntity || len(em.Errors) == 0 {
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
