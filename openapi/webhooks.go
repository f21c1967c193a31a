package openapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

// ProblemWebhookRejected: an inbound message (a webhook) was refused before
// anything was recorded (400).
const ProblemWebhookRejected = "/problems/webhook-rejected"

type stripeWebhookInput struct {
	Signature string `header:"Stripe-Signature" example:"t=1764000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd" doc:"Stripe's signature of the body: t=<unix time>,v1=<HMAC-SHA256 hex>[,v1=…]. Verified against every configured signing secret (STRIPE_WEBHOOK_SECRET)."`
	RawBody   []byte `contentType:"application/json"`
}

// WebhookReceipt is the answer to an accepted webhook delivery.
type WebhookReceipt struct {
	Received bool `json:"received" doc:"Always true: the event is recorded, and will be applied once."`
	// Duplicate is true for a delivery of an event already recorded.
	Duplicate bool `json:"duplicate" doc:"true when the event was already recorded by an earlier delivery; nothing was written."`
}

type webhookOutput struct {
	Body WebhookReceipt
}

func (h *handlers) registerWebhooks() {
	op := huma.Operation{
		OperationID: "webhook-stripe",
		Method:      http.MethodPost,
		Path:        "/webhooks/stripe",
		Summary:     "Receive a Stripe webhook event",
		Description: "Stripe's webhook endpoint. The Stripe-Signature header is verified against the configured signing " +
			"secrets (several during a rotation) within Stripe's tolerance of five minutes; the event is then recorded " +
			"under its id with the job that applies it, in one transaction, and acknowledged with 200. A duplicate " +
			"delivery answers 200 and writes nothing. Events are applied exactly once, in any order, by a background " +
			"job: refunds made in Stripe's dashboard, disputes, and charge outcomes of bookings the service has not " +
			"finished. A refused delivery (a missing or bad signature, a stale timestamp, a body that is not an " +
			"event: 400; over 1 MiB: 413) records nothing. Without a configured secret the route answers 404. " +
			"Authenticated by the signature alone, not by an API key. Stripe retries a delivery until it is " +
			"answered 2xx, and may send an event more than once or out of order: every retry is idempotent, " +
			"keyed by the event's id.",
		Tags:          []string{"webhooks"},
		DefaultStatus: http.StatusOK,
		// The limit is the inbox's own (service.MaxInboundEventBytes), so
		// that an oversized body is refused and counted like any other
		// refusal: Huma reads what limitWebhookBody lets through.
		MaxBodyBytes: -1,
		Middlewares:  huma.Middlewares{limitWebhookBody},
		// The body is verified byte for byte against its signature, then
		// parsed by the inbox; Huma only hands it over.
		SkipValidateBody: true,
	}
	h.errorResponses(&op, 400, 404, 413, 500)
	op.Responses["400"].Description = "/problems/webhook-rejected: a missing or bad signature, a stale timestamp, or a body that is not an event. Nothing recorded."
	op.Responses["413"].Description = "The body is larger than 1 MiB. Nothing recorded."
	op.Responses["404"].Description = "Webhooks from Stripe are not configured (STRIPE_WEBHOOK_SECRET unset)."
	huma.Register(h.api, op, h.stripeWebhook)
	registered := h.api.OpenAPI().Paths[op.Path].Post
	// What the body is to the service: an event, read whole only once its
	// signature is verified.
	registered.RequestBody.Content["application/json"].Schema = &huma.Schema{
		Type:        huma.TypeObject,
		Description: "A Stripe event (https://docs.stripe.com/api/events/object), verified byte for byte against Stripe-Signature before it is read. Any other body is refused (400).",
		Required:    []string{"id", "object", "type", "data"},
		Properties: map[string]*huma.Schema{
			"id":     {Type: huma.TypeString, MinLength: ptr(1)},
			"object": {Type: huma.TypeString, Description: "event"},
			"type":   {Type: huma.TypeString, MinLength: ptr(1)},
			"data":   {Type: huma.TypeObject, Required: []string{"object"}},
		},
	}
	registered.RequestBody.Content["application/json"].Examples = map[string]*huma.Example{
		"charge-refunded": example("A refund made in Stripe's dashboard (abridged)", json.RawMessage(exampleStripeEvent)),
	}
	registered.Responses["200"].Content["application/json"].Examples = map[string]*huma.Example{
		"recorded":  example("Recorded; it will be applied once", WebhookReceipt{Received: true}),
		"duplicate": example("Already recorded by an earlier delivery; nothing written", WebhookReceipt{Received: true, Duplicate: true}),
	}
}

const exampleStripeEvent = `{"id":"evt_3OdxS2LkdIwHu7ix0mPq4Y1z","object":"event","api_version":"2023-10-16",` +
	`"created":1764000000,"type":"charge.refunded","livemode":false,"pending_webhooks":1,` +
	`"request":{"id":null,"idempotency_key":null},"data":{"object":{"id":"ch_3OdxS2LkdIwHu7ix0c9Q","object":"charge",` +
	`"amount":2000,"amount_refunded":2000,"currency":"usd","refunded":true,"status":"succeeded",` +
	`"metadata":{"ar_ns":"6f1c0c7e2b7d4f0e9a1b3c5d7e9f1a2b"}}}}`

func (h *handlers) stripeWebhook(ctx context.Context, in *stripeWebhookInput) (*webhookOutput, error) {
	dup, err := h.svc.InboxReceive(ctx, service.InboxSourceStripe, in.RawBody, in.Signature)
	if err != nil {
		return nil, h.fail(ctx, "stripe webhook", err)
	}
	return &webhookOutput{Body: WebhookReceipt{Received: true, Duplicate: dup}}, nil
}

// limitWebhookBody lets Huma read one byte more than the inbox accepts, so
// that the inbox sees (and refuses) an oversized body without reading all
// of it.
func limitWebhookBody(ctx huma.Context, next func(huma.Context)) {
	next(&limitedBodyContext{humaContext: ctx, body: io.LimitReader(ctx.BodyReader(), service.MaxInboundEventBytes+1)})
}

// humaContext names the embedded huma.Context apart from its Context method.
type humaContext = huma.Context

type limitedBodyContext struct {
	humaContext
	body io.Reader
}

func (c *limitedBodyContext) BodyReader() io.Reader { return c.body }

// ptr is a pointer to v, for the optional keywords of a schema.
func ptr[T any](v T) *T { return &v }
