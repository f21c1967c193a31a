package openapi

import (
	"context"
	"net/http"
	"reflect"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

type rideCreateInput struct {
	IdempotencyKey string `header:"Idempotency-Key" required:"true" minLength:"20" maxLength:"512" pattern:"^(?:[!#-~][!-~]{19,254}|\"(?:[!#-\\[\\]-~]|\\\\[\"\\\\]){20,255}\")$" patternDescription:"20 to 255 printable ASCII characters, bare or as a quoted structured-field string" example:"MVUB2FKCT3XG5OSXEUDMPBZTIZ" doc:"20 to 255 printable ASCII characters, bare or as a quoted structured-field string. One key per logical booking: retry with the same key."`
	Body           rideCreateBody
}

// rideCreateBody decodes and validates itself (see ride_body.go): the
// operation is registered with SkipValidateBody.
type rideCreateBody struct {
	OriginLat float64 `json:"origin_lat" minimum:"-90" maximum:"90" doc:"Latitude of the origin, degrees."`
	OriginLon float64 `json:"origin_lon" minimum:"-180" maximum:"180" doc:"Longitude of the origin, degrees."`
	TargetLat float64 `json:"target_lat" minimum:"-90" maximum:"90" doc:"Latitude of the destination, degrees."`
	TargetLon float64 `json:"target_lon" minimum:"-180" maximum:"180" doc:"Longitude of the destination, degrees."`

	// decoded says decodeBody ran; problems is what it found wrong.
	decoded  bool
	problems []error
}

// storedOutput writes a stored response byte for byte.
type storedOutput struct {
	Status      int
	ContentType string `header:"Content-Type"`
	Replayed    string `header:"Idempotent-Replayed" doc:"true when this response is a replay of the first one stored for the key."`
	Body        []byte
}

// replayHeaders documents the replay header of a stored response.
func replayHeaders() map[string]*huma.Param {
	return map[string]*huma.Param{"Idempotent-Replayed": {
		Description: "Present and true when the response is a replay of the stored response of the first request with this key.",
		Schema:      &huma.Schema{Type: "string", Enum: []any{"true"}},
	}}
}

func storedResponse(r *service.Response) *storedOutput {
	out := &storedOutput{Status: r.Status, ContentType: "application/json", Body: r.Body}
	if r.Status >= 400 {
		out.ContentType = "application/problem+json"
	}
	if r.Replayed {
		out.Replayed = "true"
	}
	return out
}

type rideGetInput struct {
	ID int64 `path:"id" minimum:"1" example:"5351843670591273" doc:"The ride's id: drawn at random when the ride is booked, never given to another ride, even by a database restored from a backup."`
}

type rideGetOutput struct {
	Body *rideDetail
}

// rideDetail is service.RideDetail with a settlement whose schema says
// it may be null.
type rideDetail struct {
	service.Ride
	Settlement *rideSettlement `json:"settlement" doc:"What the bank settled of the ride: null until a settlement file of the acquirer's settles its charge. Fees and net amounts are the merchant's and are not shown."`
}

// rideSettlement is service.RideSettlement, described inline and nullable
// (Huma refuses nullable on a referenced object schema).
type rideSettlement service.RideSettlement

// Schema describes rideSettlement as service.RideSettlement or null.
func (*rideSettlement) Schema(r huma.Registry) *huma.Schema {
	s := huma.SchemaFromType(r, reflect.TypeFor[service.RideSettlement]())
	s.Nullable = true
	return s
}

// nullableRefs makes every property that refers to the component schema
// name say it may be null: the referenced schema inline, nullable (Huma
// refuses nullable on a reference). A pointer to a struct of the domain
// is written as null when absent.
func nullableRefs(registry huma.Registry, name string) {
	target := registry.Map()[name]
	if target == nil {
		return
	}
	ref := "#/components/schemas/" + name
	for _, s := range registry.Map() {
		for prop, p := range s.Properties {
			if p == nil || p.Ref != ref {
				continue
			}
			inline := *target
			inline.Nullable, inline.Description = true, p.Description
			s.Properties[prop] = &inline
		}
	}
}

func rideDetailFrom(d *service.RideDetail) *rideDetail {
	return &rideDetail{Ride: d.Ride, Settlement: (*rideSettlement)(d.Settlement)}
}

// rideCreateOperation is POST /rides, documented.
func (h *handlers) rideCreateOperation() huma.Operation {
	registry := h.api.OpenAPI().Components.Schemas
	rideSchema := registry.Schema(reflect.TypeOf(service.Ride{}), true, "Ride")
	replayHeader := replayHeaders()
	op := huma.Operation{
		OperationID:   "ride-create",
		Method:        service.RideCreateMethod,
		Path:          service.RideCreatePath,
		Summary:       "Book and charge a ride, exactly once per idempotency key",
		Description:   "Creates the ride, charges 20.00 USD to the rider's card and queues the receipt. When the rider's bank asks the rider to authenticate the payment (3-D Secure, under SCA rules), the answer is 202: the ride waits in charge_status requires_action, and its next_action says where to send the rider (or, for Stripe's SDKs, the PaymentIntent's client secret); the ride then moves by itself to charged (one receipt), declined, or expired after next_action.expires_at — read it with GET /rides/{id}. Definitive answers (201, 202, 402) are stored and replayed byte for byte for every later request with the same key, and so is 409 /problems/booking-refunded: the booking of this key was lost (a database restore) and its charge refunded, so nothing is charged again; book under a new key. Any other 409, 500 and 503 are not stored: retry with the same key and the request continues where it stopped.",
		Tags:          []string{"rides"},
		DefaultStatus: http.StatusCreated,
		MaxBodyBytes:  maxBodyBytes,
		// The body validates itself in the pass that decodes it.
		SkipValidateBody: true,
		Security:         []map[string][]string{{schemeRider: {}}},
		Middlewares:      huma.Middlewares{h.requireRider, h.replayFromMemory},
		Responses: map[string]*huma.Response{
			"201": {
				Description: "The ride, booked and charged. Stored.",
				Headers:     replayHeader,
				Content: map[string]*huma.MediaType{"application/json": {Schema: rideSchema, Examples: map[string]*huma.Example{
					"charged": example("Booked and charged (the same bytes on every replay)", exampleRide(false)),
				}}},
			},
			"202": {
				Description: "The ride is booked and waits for its rider: their bank asks them to authenticate the payment. Send the rider to next_action.redirect_url (or hand next_action.client_secret to Stripe's SDK); the bank sends them back to the service, and the ride moves on to charged, declined or expired. Nothing is charged yet. Stored: replays give the same bytes, whatever the ride became since.",
				Headers:     replayHeader,
				Content: map[string]*huma.MediaType{"application/json": {Schema: rideSchema, Examples: map[string]*huma.Example{
					"requires-action": example("The bank asks for authentication", exampleWaitingRide()),
				}}},
			},
		},
	}
	jsonRequestExamples(&op, map[string]*huma.Example{"ride": example("From San Francisco to Oakland", exampleRideBody)})
	h.errorResponses(&op, 400, 401, 402, 409, 413, 415, 422, 429, 500, 503)
	op.Responses["402"].Headers = replayHeader
	op.Responses["402"].Content["application/problem+json"].Schema = registry.Schema(reflect.TypeOf(service.Problem{}), true, "DeclinedProblem")
	withExamples(&op, "402", map[string]*huma.Example{
		"declined":    problemExamples[http.StatusPaymentRequired]["declined"],
		"balance-due": balanceDueExample,
	})
	withExamples(&op, "422", map[string]*huma.Example{
		"invalid-field": problemExamples[http.StatusUnprocessableEntity]["invalid-field"],
		"key-reused":    keyReusedExample,
	})
	return op
}

func (h *handlers) registerRides() {
	huma.Register(h.api, h.rideCreateOperation(), h.rideCreate)
	h.registerRideList()

	op := huma.Operation{
		OperationID: "ride-get",
		Method:      http.MethodGet,
		Path:        "/rides/{id}",
		Summary:     "Get one of the rider's rides, with its charge and refund",
		Description: "Reads the ride as it is now, with everything its rider may know of it: charge_status is pending until the charge is decided; a declined ride carries the decline_code and decline_message its rider was shown (the 402 answer names the ride in ride_id); refund_status follows a refund, with the processor's refund_failure_code when it refused one; settlement is null until the bank's settlement file settles the charge, then says when and in which payout (and the same of the refund). " +
			"Read-only and safe to retry at any time; it takes no Idempotency-Key. Another rider's ride is 404, as if it did not exist.",
		Tags:        []string{"rides"},
		Security:    []map[string][]string{{schemeRider: {}}},
		Middlewares: huma.Middlewares{h.requireRider},
		Responses: map[string]*huma.Response{
			"200": {Description: "The ride.", Content: map[string]*huma.MediaType{"application/json": {Examples: map[string]*huma.Example{
				"charged":  example("Booked and charged", exampleRideDetail(exampleRide(false), nil)),
				"settled":  example("Charged, and settled by the bank", exampleRideDetail(exampleRide(false), exampleSettlement(false))),
				"refunded": example("Charged, then refunded; both settled", exampleRideDetail(exampleRide(true), exampleSettlement(true))),
				"declined": example("The card was declined", exampleRideDetail(exampleDeclinedRide(), nil)),
			}}}},
		},
	}
	h.errorResponses(&op, 401, 404, 422, 429, 500, 503)
	withExamples(&op, "503", map[string]*huma.Example{"overloaded": overloadedExample})
	withExamples(&op, "422", map[string]*huma.Example{"invalid-id": example("The id is not a positive integer",
		problem(422, "", "validation failed", &huma.ErrorDetail{Message: "expected number >= 1", Location: "path.id", Value: 0}))})
	withExamples(&op, "500", map[string]*huma.Example{"internal": example("Our failure: retry", problem(500, "", "internal error"))})
	huma.Register(h.api, op, h.rideGet)
}

func (h *handlers) rideCreate(ctx context.Context, in *rideCreateInput) (*storedOutput, error) {
	key, err := service.ParseIdempotencyKey(in.IdempotencyKey)
	if err != nil {
		return nil, h.fail(ctx, "ride create", err)
	}
	params := in.Body.params()
	resp, err := h.svc.RideCreate(ctx, riderFrom(ctx).ID, key, params, clientIP(ctx))
	if err != nil {
		return nil, h.fail(ctx, "ride create", err)
	}
	return storedResponse(resp), nil
}

func (h *handlers) rideGet(ctx context.Context, in *rideGetInput) (*rideGetOutput, error) {
	ride, err := h.svc.RideDetailGet(ctx, riderFrom(ctx).ID, in.ID)
	if err != nil {
		return nil, h.fail(ctx, "ride get", err)
	}
	return &rideGetOutput{Body: rideDetailFrom(ride)}, nil
}
