package openapi

import (
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/accounts"
)

// The examples of the spec: one request and one answer per documented
// status of every operation, in the shapes the service really sends, so
// that a reader of /docs (or of openapi.yaml) sees each exchange whole.

var (
	exampleTime     = time.Date(2026, 11, 22, 3, 46, 25, 726925000, time.UTC)
	exampleChargeID = "ch_sUQaF4uzWHZhMy56"
	exampleRefundID = "re_Q2hXn7vKp4LmT9aZ"
	exampleCustomer = "cus_P8mRk2VnX5cJt3Lq"
)

// Example ids, drawn as the database draws them: at random, below 2^53.
const (
	exampleRideID       = 5351843670591273
	exampleUserID       = 3968721950428136
	exampleKeyID        = 7431029865513702
	exampleRevokedKeyID = 1587904421639058
)

// exampleRideBody is the example body of POST /rides.
var exampleRideBody = rideCreateBody{OriginLat: 37.7749, OriginLon: -122.4194, TargetLat: 37.8044, TargetLon: -122.2712}

func exampleRide(refunded bool) *service.Ride {
	r := &service.Ride{
		ID: exampleRideID, CreatedAt: exampleTime,
		OriginLat: exampleRideBody.OriginLat, OriginLon: exampleRideBody.OriginLon,
		TargetLat: exampleRideBody.TargetLat, TargetLon: exampleRideBody.TargetLon,
		AmountCents: 2000, Currency: "usd",
		ChargeStatus: "charged", PaymentID: &examplePaymentID, ChargeID: &exampleChargeID, StripeChargeID: &exampleChargeID,
		RefundStatus: "none", DisputeStatus: service.DisputeNone, Processor: service.ProcessorStripe,
	}
	r.Capture = service.CaptureBooking
	if refunded {
		r.RefundStatus, r.RefundID, r.StripeRefundID = "refunded", &exampleRefundID, &exampleRefundID
	}
	return r
}

// examplePaymentID is the example ride's PaymentIntent.
var examplePaymentID = "pi_3QAbCdEfGhIjKlMn0AbCdEfG"

// exampleWaitingRide is a ride whose rider's bank asked for authentication.
func exampleWaitingRide() *service.Ride {
	r := exampleRide(false)
	secret := examplePaymentID + "_secret_AbCdEfGhIjKlMnOpQrStUvWxY"
	r.ChargeStatus, r.ChargeID, r.StripeChargeID = "requires_action", nil, nil
	r.NextAction = &service.RideNextAction{
		Type:         "redirect_to_url",
		RedirectURL:  "https://hooks.stripe.com/3d_secure_2/hosted?merchant=acct_1QAbCdEfGh&payment_intent=" + examplePaymentID,
		ClientSecret: &secret,
		ExpiresAt:    exampleTime.Add(30 * time.Minute),
	}
	return r
}

// exampleRideDetail is a ride as GET /rides/{id} shows it.
func exampleRideDetail(r *service.Ride, s *service.RideSettlement) *rideDetail {
	return rideDetailFrom(&service.RideDetail{Ride: *r, Settlement: s})
}

// exampleSettlement is the bank's settlement of the example ride's charge,
// and of its refund when refunded.
func exampleSettlement(refunded bool) *service.RideSettlement {
	s := &service.RideSettlement{SettledAt: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC), PayoutID: "po_1QAbCdEfGhIjKlMn"}
	if refunded {
		at, payout := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC), "po_1QNoPqRsTuVwXyZa"
		s.RefundSettledAt, s.RefundPayoutID = &at, &payout
	}
	return s
}

// exampleDeclinedRide is a ride whose charge was declined.
func exampleDeclinedRide() *service.Ride {
	r := exampleRide(false)
	code, msg := "card_declined", "Your card was declined."
	r.ChargeStatus, r.ChargeID, r.StripeChargeID, r.DeclineCode, r.DeclineMessage = "declined", nil, nil, &code, &msg
	return r
}

// exampleAPIKey is the shape of a minted API key.
const exampleAPIKey = "ark_4XbT9qLm2VwK7sNc3RzP8hJd6FgY5aEu0iOp1QwE2rT"

// exampleUserNew is a rider just created: the processor's customer is
// created afterwards, by a job.
func exampleUserNew() *service.User {
	u := exampleUser()
	u.StripeCustomerID = nil
	u.Registrations = []service.Registration{}
	return u
}

func exampleUser() *service.User {
	return &service.User{ID: exampleUserID, CreatedAt: exampleTime, Email: "rider@example.com", PaymentSource: "tok_visa", StripeCustomerID: &exampleCustomer,
		Registrations: []service.Registration{{Processor: service.ProcessorStripe, Status: "registered", UpdatedAt: exampleTime}}}
}

// exampleUserReplaced is a rider just given another payment source: the
// new source is registered afterwards, by a job.
func exampleUserReplaced() *service.User {
	u := exampleUserNew()
	u.PaymentSource = "tok_mastercard"
	return u
}

// exampleUserRefused is a rider whose source one processor refused.
func exampleUserRefused() *service.User {
	u := exampleUser()
	reason := "adyen refused the payment source: Invalid card number"
	u.Registrations = append(u.Registrations, service.Registration{Processor: service.ProcessorAdyen, Status: "refused", Reason: &reason, UpdatedAt: exampleTime})
	return u
}

// exampleAPIKeys is a rider's key list: one live, one revoked.
func exampleAPIKeys() []*accounts.APIKey {
	used, revoked := exampleTime.Add(time.Hour), exampleTime.Add(48*time.Hour)
	return []*accounts.APIKey{
		{ID: exampleRevokedKeyID, CreatedAt: exampleTime, LastUsedAt: &used, RevokedAt: &revoked},
		{ID: exampleKeyID, CreatedAt: exampleTime.Add(47 * time.Hour), LastUsedAt: &revoked},
	}
}

var exampleRefund = service.RideRefundResult{
	RideID: exampleRideID, Status: "refunded", AmountCents: 2000, Currency: "usd",
	StripeRefundID: exampleRefundID, CreatedAt: exampleTime.Add(90 * time.Minute),
}

// example is one named example.
func example(summary string, value any) *huma.Example {
	return &huma.Example{Summary: summary, Value: value}
}

// problem is an example problem+json body.
func problem(status int, typ, detail string, fields ...*huma.ErrorDetail) *huma.ErrorModel {
	return &huma.ErrorModel{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail, Errors: fields}
}

// problemExamples are the example bodies of each error status, as every
// operation documenting the status answers it; an operation whose status
// has other causes replaces them (see withExamples).
var problemExamples = map[int]map[string]*huma.Example{
	http.StatusBadRequest: {
		"missing-key": example("The Idempotency-Key header is missing",
			problem(400, ProblemInvalidKeyHeader, "the Idempotency-Key header is required",
				&huma.ErrorDetail{Message: "the Idempotency-Key header is required", Location: "header.Idempotency-Key"})),
		"malformed-json": example("The body is not JSON",
			problem(400, "", "validation failed",
				&huma.ErrorDetail{Message: "unexpected end of JSON input", Location: "body", Value: `{"origin_lat":`})),
	},
	http.StatusUnauthorized: {
		"no-key": example("No valid credentials", problem(401, "", "a valid API key is required")),
	},
	http.StatusPaymentRequired: {
		"declined": example("The card was declined (stored, replayed); ride_id names the declined ride",
			service.Problem{Type: service.ProblemCardDeclined, Title: "Card declined", Status: 402,
				Detail: "the card was declined: Your card was declined.", RideID: exampleRideID}),
	},
	http.StatusNotFound: {
		"not-found": example("Not the caller's, or does not exist", problem(404, "", "no such ride")),
	},
	http.StatusConflict: {
		"key-in-use": example("Another request holds the key: retry after Retry-After",
			problem(409, ProblemKeyInUse, "another request with this idempotency key is in progress; retry later")),
	},
	http.StatusRequestEntityTooLarge: {
		"too-large": example("The body is over 16 KiB", problem(413, "", "request body is too large limit=16384 bytes")),
	},
	http.StatusUnsupportedMediaType: {
		"no-content-type": example("The body is not sent as application/json",
			problem(415, "", "a request body must be sent with Content-Type: application/json",
				&huma.ErrorDetail{Message: "required with a request body", Location: "header.Content-Type"})),
	},
	http.StatusUnprocessableEntity: {
		"invalid-field": example("A field is out of range",
			problem(422, "", "validation failed",
				&huma.ErrorDetail{Message: "expected number <= 90", Location: "body.origin_lat", Value: 91})),
	},
	http.StatusInternalServerError: {
		"internal": example("Our failure, not stored: retry with the same key",
			problem(500, "", "internal error; retry with the same idempotency key")),
	},
	http.StatusTooManyRequests: {
		"rate-limited":      rateLimitedExample,
		"too-many-failures": authLimitedExample,
	},
	http.StatusServiceUnavailable: {
		"processor-unavailable": example("No definitive answer from the processor, not stored: retry with the same key",
			problem(503, ProblemProcessorDown, "the payment processor is unavailable; retry with the same idempotency key")),
		"overloaded": overloadedExample,
	},
}

// The answers of requests refused before they reach the service.
var (
	rateLimitedExample = example("The rider's budget is spent: nothing was done, retry after Retry-After",
		problem(429, ProblemRateLimited, "the rider's writes budget (50 per 10s) is spent; retry after 1 s (the same idempotency key is unused)"))
	authLimitedExample = example("Too many failed authentications from the client's address",
		problem(429, ProblemAuthLimited, "too many failed authentications from this address; retry after 30 s"))
	overloadedExample = example("The service is at its capacity: nothing was done, retry after Retry-After",
		problem(503, ProblemOverloaded, "the service is at its capacity; retry after 2 s with the same idempotency key (nothing was done)"))
)

// balanceDueExample is the 402 of a booking by a rider who owes the
// balance of a ride: instance names the ride.
var balanceDueExample = example("The rider owes the balance of a ride (not stored): instance names it; pay it, then book again with the same key",
	service.Problem{Type: ProblemBalanceDue, Title: "Payment Required", Status: 402,
		Detail:   "the rider owes 6.00 USD for ride 5351843670591273: pay it (POST /rides/5351843670591273/balance), then book again",
		Instance: "/rides/5351843670591273"})

// keyReusedExample is the 422 of an idempotency key sent again with another
// request.
var keyReusedExample = example("The key was used with a different request",
	problem(422, ProblemKeyReused, "this idempotency key was already used with a different request"))

// withExamples sets the examples of the body of op's response to status,
// in whichever media type it has.
func withExamples(op *huma.Operation, status string, examples map[string]*huma.Example) {
	for _, mt := range op.Responses[status].Content {
		mt.Examples = examples
	}
}

// jsonRequestExamples documents the examples of op's JSON request body;
// Huma adds the schema when it registers op.
func jsonRequestExamples(op *huma.Operation, examples map[string]*huma.Example) {
	op.RequestBody = &huma.RequestBody{Content: map[string]*huma.MediaType{"application/json": {Examples: examples}}}
}

// finishExamples completes the examples of the registered operations: the
// first schema example of every parameter that has no example of its own
// is copied up to the parameter, where readers and generators look for it,
// and the default error response Huma documents gets the example of an
// internal error.
func finishExamples(oapi *huma.OpenAPI) {
	for _, item := range oapi.Paths {
		for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch} {
			if op == nil {
				continue
			}
			for _, p := range op.Parameters {
				if p.Example == nil && p.Schema != nil && len(p.Schema.Examples) > 0 {
					p.Example = p.Schema.Examples[0]
				}
			}
			if d := op.Responses["default"]; d != nil {
				for _, mt := range d.Content {
					if mt.Example == nil && len(mt.Examples) == 0 {
						mt.Examples = map[string]*huma.Example{"internal": example("Our failure: retry", problem(500, "", "internal error"))}
					}
				}
			}
		}
	}
}
