package openapi

import (
	"context"
	"net/http"
	"reflect"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

// Problem types of a trip's refusals (never stored).
const (
	// ProblemRideNotCompletable: the ride holds nothing to capture, or was
	// completed with another fare (409).
	ProblemRideNotCompletable = "/problems/ride-not-completable"
	// ProblemRideNotCancellable: the ride was completed (refund it), or
	// holds nothing to release (409).
	ProblemRideNotCancellable = "/problems/ride-not-cancellable"
	// ProblemBalanceDue: the rider owes the balance of a ride and books
	// nothing until it is paid (402).
	ProblemBalanceDue = "/problems/balance-due"
	// ProblemNoBalanceDue: the ride owes nothing (409).
	ProblemNoBalanceDue = "/problems/no-balance-due"
)

// schemeDispatch is the dispatch side's credential.
const schemeDispatch = "dispatchToken"

const tripKeyDoc = "20 to 255 printable ASCII characters, bare or as a quoted structured-field string. Retry with the same key; any other key acting on the same ride gets the same outcome."

type rideCompleteInput struct {
	ID             int64  `path:"id" minimum:"1" example:"5351843670591273" doc:"The ride's id."`
	IdempotencyKey string `header:"Idempotency-Key" required:"true" minLength:"20" maxLength:"512" pattern:"^(?:[!#-~][!-~]{19,254}|\"(?:[!#-\\[\\]-~]|\\\\[\"\\\\]){20,255}\")$" patternDescription:"20 to 255 printable ASCII characters, bare or as a quoted structured-field string" example:"TRIP4K7W2HXN5TBY4MVC8PLDA" doc:"20 to 255 printable ASCII characters, bare or as a quoted structured-field string. Retry with the same key; any other key acting on the same ride gets the same outcome."`
	Body           struct {
		FareCents int64  `json:"fare_cents" minimum:"1" example:"1850" doc:"The trip's final fare in the currency's minor unit (cents): a positive integer, at most 5 times the ride's hold (amount_cents)."`
		Currency  string `json:"currency" minLength:"3" maxLength:"3" pattern:"^[a-z]{3}$" example:"usd" doc:"The ride's currency (ISO 4217, lower case)."`
	}
}

type rideTripInput struct {
	ID             int64  `path:"id" minimum:"1" example:"5351843670591273" doc:"The ride's id."`
	IdempotencyKey string `header:"Idempotency-Key" required:"true" minLength:"20" maxLength:"512" pattern:"^(?:[!#-~][!-~]{19,254}|\"(?:[!#-\\[\\]-~]|\\\\[\"\\\\]){20,255}\")$" patternDescription:"20 to 255 printable ASCII characters, bare or as a quoted structured-field string" example:"CANCEL7W2HXN5TBY4MVC8PLDA" doc:"20 to 255 printable ASCII characters, bare or as a quoted structured-field string. Retry with the same key; any other key acting on the same ride gets the same outcome."`
}

func (h *handlers) registerTrips() {
	ride := h.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(service.Ride{}), true, "Ride")
	replay := replayHeaders()
	rideResponse := func(desc string, r *service.Ride) *huma.Response {
		return &huma.Response{Description: desc, Headers: replay,
			Content: map[string]*huma.MediaType{"application/json": {Schema: ride, Examples: map[string]*huma.Example{
				string(r.ChargeStatus): example("The ride (the same bytes on every replay)", r),
			}}}}
	}

	complete := huma.Operation{
		OperationID: "ride-complete",
		Method:      service.RideCompleteMethod,
		Path:        service.RideCompletePath,
		Summary:     "Complete a trip with its final fare (the dispatch side)",
		Description: "Captures the trip's final fare from its hold, once per ride whatever the keys. A fare within the " +
			"hold is captured and the rest released; a fare above it captures the whole hold and charges the difference " +
			"as a payment of its own, without the rider: if that payment fails, the ride is completed with a balance " +
			"due (balance_due_cents) and the rider's next booking is refused (402, /problems/balance-due) until it is " +
			"paid (POST /rides/{id}/balance). The receipt, with the final fare, is sent once the fare is captured. " +
			"The request that completed the ride gets 201, any other key with the same fare 200; at a processor that " +
			"confirms captures later (adyen) the answer is 202 with the ride capturing. 200, 201 and 202 are stored and " +
			"replayed byte for byte. A ride that holds nothing to capture, or was completed with another fare, is 409 " +
			"(/problems/ride-not-completable, not stored). 503 leaves the ride at its recovery point: retry with the same key.",
		Tags:          []string{"trips"},
		DefaultStatus: http.StatusCreated,
		Security:      []map[string][]string{{schemeDispatch: {}}},
		Middlewares:   huma.Middlewares{h.requireDispatch},
		Responses: map[string]*huma.Response{
			"201": rideResponse("The trip is completed by this request: the fare is captured. Stored.", exampleTrip(service.RideChargeCompleted)),
			"200": rideResponse("The trip was completed by a request under another key, with the same fare. Stored.", exampleTrip(service.RideChargeCompleted)),
			"202": rideResponse("The processor took the capture on and confirms it later (adyen): the ride is capturing. Stored.", exampleTrip(service.RideChargeCapturing)),
		},
	}
	jsonRequestExamples(&complete, map[string]*huma.Example{"fare": example("A fare below the hold: the rest is released",
		map[string]any{"fare_cents": 1850, "currency": "usd"})})
	h.errorResponses(&complete, 400, 401, 404, 409, 422, 429, 500, 503)
	withExamples(&complete, "409", map[string]*huma.Example{
		"key-in-use": problemExamples[http.StatusConflict]["key-in-use"],
		"not-completable": example("The ride holds nothing to capture (not stored)",
			problem(409, ProblemRideNotCompletable, "the ride was cancelled and its hold released")),
	})
	withExamples(&complete, "422", map[string]*huma.Example{"key-reused": keyReusedExample})
	huma.Register(h.api, complete, func(ctx context.Context, in *rideCompleteInput) (*storedOutput, error) {
		key, err := service.ParseIdempotencyKey(in.IdempotencyKey)
		if err != nil {
			return nil, h.fail(ctx, "ride complete", err)
		}
		resp, err := h.svc.RideComplete(ctx, key, service.RideCompleteParams{
			RideID: in.ID, FareCents: in.Body.FareCents, Currency: in.Body.Currency,
		}, clientIP(ctx))
		if err != nil {
			return nil, h.fail(ctx, "ride complete", err)
		}
		return storedResponse(resp), nil
	})

	cancel := huma.Operation{
		OperationID: "ride-cancel",
		Method:      service.RideCancelMethod,
		Path:        service.RideCancelPath,
		Summary:     "Cancel a trip before it is completed and release its hold",
		Description: "Releases the ride's hold; nothing is captured. A rider cancels their own ride with their API key; " +
			"the dispatch side any ride with its token. A ride is cancelled once whatever the keys: the request that " +
			"cancelled it gets 201, any other 200 with the same ride; at a processor that confirms cancels later (adyen) the " +
			"answer is 202 with the ride cancelling, until the processor's notification ends it cancelled (or, when the " +
			"processor refuses the cancel, leaves it cancelling with cancel_failure for an operator). 200, 201 and 202 are " +
			"stored and replayed byte for byte for a retry with the same idempotency key. A completed ride is " +
			"409 (/problems/ride-not-cancellable, not stored): refund it instead. A cancellation racing a completion: exactly one wins. " +
			"A hold the processor shows captured already (a completion lost with a database restore) completes the ride, and the " +
			"cancellation answers 409 /problems/trip-captured (stored).",
		Tags:          []string{"trips"},
		DefaultStatus: http.StatusCreated,
		Security:      []map[string][]string{{schemeRider: {}}, {schemeDispatch: {}}},
		Middlewares:   huma.Middlewares{h.requireRiderOrDispatch},
		Responses: map[string]*huma.Response{
			"201": rideResponse("The ride is cancelled by this request; its hold is released. Stored.", exampleTrip(service.RideChargeCancelled)),
			"200": rideResponse("The ride was cancelled by a request under another key. Stored.", exampleTrip(service.RideChargeCancelled)),
			"202": rideResponse("The processor took the cancel on and confirms it later (adyen): the ride is cancelling. Stored.", exampleTrip(service.RideChargeCancelling)),
		},
	}
	h.errorResponses(&cancel, 400, 401, 404, 409, 422, 429, 500, 503)
	withExamples(&cancel, "409", map[string]*huma.Example{
		"key-in-use": problemExamples[http.StatusConflict]["key-in-use"],
		"not-cancellable": example("The trip was completed (not stored)",
			problem(409, ProblemRideNotCancellable, "the trip was completed and its fare captured; refund the ride instead (POST /rides/{id}/refund)")),
		"trip-captured": example("The hold was captured already: the ride is completed (stored, replayed)",
			problem(409, service.ProblemTripCaptured, "the trip's fare was captured already; the ride is completed, not cancelled: refund it instead")),
	})
	cancel.Responses["409"].Headers["Idempotent-Replayed"] = replay["Idempotent-Replayed"]
	withExamples(&cancel, "422", map[string]*huma.Example{"key-reused": keyReusedExample})
	huma.Register(h.api, cancel, func(ctx context.Context, in *rideTripInput) (*storedOutput, error) {
		key, err := service.ParseIdempotencyKey(in.IdempotencyKey)
		if err != nil {
			return nil, h.fail(ctx, "ride cancel", err)
		}
		var userID int64 // the dispatch side
		if rider := riderFrom(ctx); rider != nil {
			userID = rider.ID
		}
		resp, err := h.svc.RideCancel(ctx, userID, key, in.ID, clientIP(ctx))
		if err != nil {
			return nil, h.fail(ctx, "ride cancel", err)
		}
		return storedResponse(resp), nil
	})

	balance := huma.Operation{
		OperationID: "ride-balance-pay",
		Method:      service.RideBalanceMethod,
		Path:        service.RideBalancePath,
		Summary:     "Pay the balance the rider owes for a ride",
		Description: "Charges balance_due_cents (a fare above the ride's hold whose payment failed) to the rider's current " +
			"payment source; register another with PUT /users/{email} first if the card was declined. 201 with the ride " +
			"once paid, 200 when it was paid already, 402 when the payment is declined (the balance stays due: pay again " +
			"under a new key); all stored and replayed byte for byte for a retry with the same idempotency key. A ride that " +
			"owes nothing is 409 (/problems/no-balance-due, not stored).",
		Tags:          []string{"trips"},
		DefaultStatus: http.StatusCreated,
		Security:      []map[string][]string{{schemeRider: {}}},
		Middlewares:   huma.Middlewares{h.requireRider},
		Responses: map[string]*huma.Response{
			"201": rideResponse("The balance is paid by this request. Stored.", exampleBalancePaid()),
			"200": rideResponse("The balance was paid already. Stored.", exampleBalancePaid()),
		},
	}
	h.errorResponses(&balance, 400, 401, 402, 404, 409, 422, 429, 500, 503)
	balance.Responses["402"].Content["application/problem+json"].Schema = h.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(service.Problem{}), true, "DeclinedProblem")
	withExamples(&balance, "402", map[string]*huma.Example{
		"declined": example("The balance's payment was declined (stored, replayed); ride_id names the ride that owes it",
			service.Problem{Type: service.ProblemCardDeclined, Title: "Card declined", Status: 402,
				Detail: "the card was declined: Your card was declined.", RideID: exampleRideID}),
	})
	withExamples(&balance, "409", map[string]*huma.Example{
		"key-in-use": problemExamples[http.StatusConflict]["key-in-use"],
		"no-balance-due": example("The ride owes nothing (not stored)",
			problem(409, ProblemNoBalanceDue, "the rider owes nothing for this ride")),
	})
	withExamples(&balance, "422", map[string]*huma.Example{"key-reused": keyReusedExample})
	huma.Register(h.api, balance, func(ctx context.Context, in *rideTripInput) (*storedOutput, error) {
		key, err := service.ParseIdempotencyKey(in.IdempotencyKey)
		if err != nil {
			return nil, h.fail(ctx, "ride balance", err)
		}
		resp, err := h.svc.RideBalancePay(ctx, riderFrom(ctx).ID, key, in.ID, clientIP(ctx))
		if err != nil {
			return nil, h.fail(ctx, "ride balance", err)
		}
		return storedResponse(resp), nil
	})
}

// requireDispatch authenticates the dispatch side's token (DISPATCH_TOKEN).
func (h *handlers) requireDispatch(ctx huma.Context, next func(huma.Context)) {
	token := bearer(ctx.Header("Authorization"))
	if token != "" && h.guard.guardCtx(ctx) {
		return
	}
	if !tokenEqual(token, h.dispatchToken) {
		if token != "" {
			h.guard.failed(ctx.Context(), clientIP(ctx.Context()))
		}
		h.unauthorized(ctx, &service.Error{Code: service.CodeUnauthenticated, Message: "the dispatch token is required"})
		return
	}
	h.withinBudgets(ctx, "dispatch side's", h.limits.Dispatch, h.limits.DispatchConcurrency, next)
}

// requireRiderOrDispatch lets the dispatch side's token through as the
// dispatch side, and authenticates anything else as a rider.
func (h *handlers) requireRiderOrDispatch(ctx huma.Context, next func(huma.Context)) {
	if token := bearer(ctx.Header("Authorization")); token != "" && tokenEqual(token, h.dispatchToken) {
		h.withinBudgets(ctx, "dispatch side's", h.limits.Dispatch, h.limits.DispatchConcurrency, next)
		return
	}
	h.requireRider(ctx, next)
}

// exampleTrip is a ride booked with capture trip, in status.
func exampleTrip(status service.RideChargeStatus) *service.Ride {
	r := exampleRide(false)
	r.Capture, r.ChargeStatus = service.CaptureTrip, status
	fare, captured, none := int64(1850), int64(1850), service.ExtraNone
	done, released := exampleTime.Add(25*time.Minute), exampleTime.Add(3*time.Minute)
	switch status {
	case service.RideChargeCompleted:
		r.FareCents, r.CapturedCents, r.ExtraStatus, r.CompletedAt = &fare, &captured, &none, &done
	case service.RideChargeCapturing:
		r.FareCents, r.ExtraStatus = &fare, &none
	case service.RideChargeCancelling:
		// Only a processor that confirms cancels later answers it.
		psp := "QFQTPCQ8HXSKGK82"
		r.Processor, r.PaymentID, r.ChargeID, r.StripeChargeID = service.ProcessorAdyen, &psp, &psp, &psp
	case service.RideChargeCancelled:
		r.ReleasedAt = &released
	}
	return r
}

// exampleBalancePaid is a completed trip whose fare above the hold was
// declined, then paid by its rider.
func exampleBalancePaid() *service.Ride {
	r := exampleTrip(service.RideChargeCompleted)
	fare, captured, extra, paid, id := int64(2600), int64(2000), int64(600), service.ExtraPaid, "ch_3QAbCdEfGhIjKlMn1XyZaBcD"
	r.FareCents, r.CapturedCents, r.ExtraCents, r.ExtraStatus, r.ExtraChargeID = &fare, &captured, &extra, &paid, &id
	return r
}
