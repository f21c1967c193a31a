package openapi

import (
	"context"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

type rideRefundInput struct {
	ID             int64  `path:"id" minimum:"1" example:"5351843670591273" doc:"The ride's id: drawn at random when the ride is booked, never given to another ride, even by a database restored from a backup."`
	IdempotencyKey string `header:"Idempotency-Key" required:"true" minLength:"20" maxLength:"512" pattern:"^(?:[!#-~][!-~]{19,254}|\"(?:[!#-\\[\\]-~]|\\\\[\"\\\\]){20,255}\")$" patternDescription:"20 to 255 printable ASCII characters, bare or as a quoted structured-field string" example:"RJ6Q3ZK7W2HXN5TBY4MVC8PLDA" doc:"20 to 255 printable ASCII characters, bare or as a quoted structured-field string. Retry with the same key; any other key refunding the same ride gets the same refund."`
}

func (h *handlers) registerRefunds() {
	schema := h.api.OpenAPI().Components.Schemas.Schema(reflect.TypeOf(service.RideRefundResult{}), true, "RideRefundResult")
	replayHeader := replayHeaders()
	op := huma.Operation{
		OperationID: "ride-refund",
		Method:      service.RideRefundMethod,
		Path:        service.RideRefundPath,
		Summary:     "Refund a charged ride in full, at most once per ride",
		Description: "Refunds the ride's whole charge and queues the refund receipt. A ride is refunded at most once, " +
			"whatever idempotency keys are used: Stripe is called with a key derived from the ride's charge, so " +
			"requests under different keys converge on one refund. The request that asked for the refund first " +
			"gets 201; a request under any other key gets the same refund with 200. 200, 201 and a refusal by the " +
			"payment processor (409, /problems/refund-rejected) are stored and replayed byte for byte for every " +
			"later request with the same key. A ride that does not exist or is not the rider's (404) or not charged " +
			"(409, /problems/ride-not-refundable) is refused without storing anything: a pending ride can be " +
			"refunded once it is charged. 500 and 503 are not stored: retry with the same key. Ride ids are never " +
			"given to another ride, even by a database restored from a backup: a ride lost with a restore stays " +
			"unknown (404), so a retried refund never refunds another ride.",
		Tags:          []string{"rides"},
		DefaultStatus: http.StatusCreated,
		Security:      []map[string][]string{{schemeRider: {}}},
		Middlewares:   huma.Middlewares{h.requireRider},
		Responses: map[string]*huma.Response{
			"201": {
				Description: "The ride is refunded; this request asked for the refund. Stored.",
				Headers:     replayHeader,
				Content: map[string]*huma.MediaType{"application/json": {Schema: schema, Examples: map[string]*huma.Example{
					"refunded": example("Refunded by this request (the same bytes on every replay)", exampleRefund),
				}}},
			},
			"200": {
				Description: "The ride was already refunded, or is being refunded, by a request under another key: the same refund. Stored.",
				Headers:     replayHeader,
				Content: map[string]*huma.MediaType{"application/json": {Schema: schema, Examples: map[string]*huma.Example{
					"already-refunded": example("Refunded by a request under another key: the same refund", exampleRefund),
				}}},
			},
		},
	}
	h.errorResponses(&op, 400, 401, 404, 409, 422, 429, 500, 503)
	withExamples(&op, "503", map[string]*huma.Example{"processor-unavailable": problemExamples[http.StatusServiceUnavailable]["processor-unavailable"]})
	op.Responses["409"].Description = "/problems/idempotency-key-in-use: another request with the same idempotency key " +
		"is in progress (Retry-After; not stored). /problems/ride-not-refundable: the ride's charge is pending or " +
		"declined (not stored). /problems/refund-rejected: the payment processor refused the refund (stored, replayed)."
	op.Responses["409"].Headers["Idempotent-Replayed"] = replayHeader["Idempotent-Replayed"]
	withExamples(&op, "409", map[string]*huma.Example{
		"key-in-use": problemExamples[http.StatusConflict]["key-in-use"],
		"not-refundable": example("The ride's charge is not decided yet (not stored)",
			problem(409, ProblemRideNotRefundable, "the ride's charge is not decided yet; a ride can be refunded once it is charged")),
		"refund-rejected": example("The processor refused the refund (stored, replayed)",
			problem(409, service.ProblemRefundRejected, "the payment processor refused the refund (charge_disputed)")),
	})
	withExamples(&op, "422", map[string]*huma.Example{"key-reused": keyReusedExample})
	huma.Register(h.api, op, h.rideRefund)
}

func (h *handlers) rideRefund(ctx context.Context, in *rideRefundInput) (*storedOutput, error) {
	key, err := service.ParseIdempotencyKey(in.IdempotencyKey)
	if err != nil {
		return nil, h.fail(ctx, "ride refund", err)
	}
	resp, err := h.svc.RideRefundCreate(ctx, riderFrom(ctx).ID, key, in.ID, clientIP(ctx))
	if err != nil {
		return nil, h.fail(ctx, "ride refund", err)
	}
	return storedResponse(resp), nil
}
