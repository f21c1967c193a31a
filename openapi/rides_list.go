package openapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

// rideListInput is the query of GET /rides, in the form of Stripe's list
// endpoints. No other parameter is taken, and none twice (strictQuery).
type rideListInput struct {
	Limit         int       `query:"limit" minimum:"1" maximum:"100" default:"10" example:"25" doc:"How many rides the page holds at most: 1 to 100."`
	StartingAfter int64     `query:"starting_after" minimum:"1" example:"5351843670591273" doc:"A ride id of the rider's, as a cursor: the page holds the rides just older than it. Pass the last ride of the previous page. Another rider's ride, or no ride, is 404."`
	EndingBefore  int64     `query:"ending_before" minimum:"1" example:"5351843670591273" doc:"A ride id of the rider's, as a cursor: the page holds the rides just newer than it (still newest first). Pass the first ride of the previous page to page back. Excludes starting_after. Another rider's ride, or no ride, is 404."`
	ChargeStatus  string    `query:"charge_status" enum:"pending,requires_action,charged,declined,expired,authorized,capturing,completed,capture_failed,cancelling,cancelled" example:"declined" doc:"Only the rides whose charge is in this status."`
	CreatedGT     time.Time `query:"created[gt]" example:"2026-11-21T23:59:59Z" doc:"Only the rides created after this time (RFC 3339). The created[…] bounds combine into one range; an empty range lists no ride."`
	CreatedGTE    time.Time `query:"created[gte]" example:"2026-11-22T00:00:00Z" doc:"Only the rides created at or after this time (RFC 3339). The created[…] bounds combine into one range; an empty range lists no ride."`
	CreatedLT     time.Time `query:"created[lt]" example:"2026-11-23T00:00:00Z" doc:"Only the rides created before this time (RFC 3339). The created[…] bounds combine into one range; an empty range lists no ride."`
	CreatedLTE    time.Time `query:"created[lte]" example:"2026-11-22T23:59:59.999999Z" doc:"Only the rides created at or before this time (RFC 3339). The created[…] bounds combine into one range; an empty range lists no ride."`
}

type rideListOutput struct {
	Body *service.RideList
}

func (h *handlers) registerRideList() {
	op := huma.Operation{
		OperationID: "ride-list",
		Method:      http.MethodGet,
		Path:        "/rides",
		Summary:     "List the rider's rides, newest first, a page at a time",
		Description: "The rider's rides, newest first (by created_at, then id), with their charge and refund as GET /rides/{id} shows them. " +
			"Pages follow cursors the way Stripe's lists do: pass the last ride's id of a page as starting_after to read the next (older) page while has_more is true, or the first ride's id as ending_before to read the previous (newer) one. " +
			"A cursor is a position, not an offset: rides booked while a client pages never shift, repeat or hide the rides of later pages. " +
			"A cursor that is not one of the rider's rides is 404, whoever's it is. " +
			"The filters created[gt], created[gte], created[lt] and created[lte] (RFC 3339 times, as Stripe's created[…] with times for Unix seconds) bound the rides' creation time; given together they are one range, and cursors page within it. " +
			"A query parameter not listed here, one given more than once, or one given without a value (starting_after=) is refused with 422 naming it (errors[].location query.<name>): a misspelt filter never lists every ride. " +
			"Read-only and safe to retry; it takes no Idempotency-Key.",
		Tags:        []string{"rides"},
		Security:    []map[string][]string{{schemeRider: {}}},
		Middlewares: huma.Middlewares{h.requireRider, h.strictQuery},
		Responses: map[string]*huma.Response{
			"200": {Description: "A page of rides.", Content: map[string]*huma.MediaType{"application/json": {Examples: map[string]*huma.Example{
				"page": example("A page, with more rides after it", &service.RideList{Data: []*service.Ride{exampleRide(true)}, HasMore: true}),
				"last": example("The last page (or no ride at all)", &service.RideList{Data: []*service.Ride{}}),
			}}}},
		},
	}
	h.errorResponses(&op, 401, 404, 422, 500)
	withExamples(&op, "404", map[string]*huma.Example{"cursor": example("The cursor is not one of the rider's rides",
		problem(404, "", "no such ride", &huma.ErrorDetail{Message: "no such ride", Location: "query.starting_after"}))})
	withExamples(&op, "422", map[string]*huma.Example{
		"limit": example("limit is out of range",
			problem(422, "", "validation failed", &huma.ErrorDetail{Message: "expected number <= 100", Location: "query.limit", Value: 101})),
		"created": example("A created[…] bound is not an RFC 3339 time",
			problem(422, "", "validation failed", &huma.ErrorDetail{Message: "invalid date/time for format " + time.RFC3339Nano, Location: "query.created[gt]", Value: "1764547200"})),
		"unknown": example("A query parameter the operation does not take",
			problem(422, "", "validation failed", &huma.ErrorDetail{Message: msgUnknownQueryParam, Location: "query.created[after]"})),
		"repeated": example("A query parameter given more than once",
			problem(422, "", "validation failed", &huma.ErrorDetail{Message: msgRepeatedQueryParam, Location: "query.limit"})),
		"empty": example("A query parameter given without a value",
			problem(422, "", "validation failed", &huma.ErrorDetail{Message: msgEmptyQueryParam, Location: "query.starting_after"})),
	})
	withExamples(&op, "500", map[string]*huma.Example{"internal": example("Our failure: retry", problem(500, "", "internal error"))})
	huma.Register(h.api, op, h.rideList)
}

func (h *handlers) rideList(ctx context.Context, in *rideListInput) (*rideListOutput, error) {
	list, err := h.svc.RideList(ctx, riderFrom(ctx).ID, service.RideListParams{
		Limit:         in.Limit,
		StartingAfter: in.StartingAfter,
		EndingBefore:  in.EndingBefore,
		ChargeStatus:  service.RideChargeStatus(in.ChargeStatus),
		CreatedGT:     in.CreatedGT,
		CreatedGTE:    in.CreatedGTE,
		CreatedLT:     in.CreatedLT,
		CreatedLTE:    in.CreatedLTE,
	})
	if err != nil {
		return nil, h.fail(ctx, "ride list", err)
	}
	return &rideListOutput{Body: list}, nil
}
