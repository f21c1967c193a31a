package openapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/atomicrides/atomicrides/service"
)

// AdyenAccepted is the answer Adyen expects to a notification it may stop
// retrying.
const AdyenAccepted = "[accepted]"

type adyenWebhookInput struct {
	RawBody []byte `contentType:"application/json"`
}

type adyenWebhookOutput struct {
	ContentType string `header:"Content-Type"`
	Body        []byte
}

func (h *handlers) registerAdyenWebhooks() {
	op := huma.Operation{
		OperationID: "webhook-adyen",
		Method:      http.MethodPost,
		Path:        "/webhooks/adyen",
		Summary:     "Receive Adyen's standard notifications",
		Description: "Adyen's standard notification endpoint. Each notification item's HMAC signature " +
			"(additionalData.hmacSignature) is verified against the configured HMAC keys (ADYEN_HMAC_KEY, several " +
			"during a rotation); every item is then recorded under its natural id (pspReference:eventCode:success) " +
			"with the job that applies it, all in one transaction, and the delivery is answered 200 with the body " +
			"[accepted], as Adyen expects. A duplicate delivery answers the same and writes nothing. Items are " +
			"applied exactly once, in any order, by a background job: AUTHORISATION of bookings the service has " +
			"not finished, REFUND, and chargebacks; items of another merchant account or deployment, and other " +
			"event codes, are acknowledged and ignored. A refused delivery (an item without or with a bad " +
			"signature, a body that is not a notification: 400; over 1 MiB: 413) records nothing. Without a " +
			"configured key the route answers 404. Authenticated by the signatures alone, not by an API key. Adyen " +
			"retries a delivery until it is answered 2xx, and may send an item more than once or out of order: every " +
			"retry is idempotent, keyed by the item's natural id.",
		Tags:          []string{"webhooks"},
		DefaultStatus: http.StatusOK,
		MaxBodyBytes:  -1,
		Middlewares:   huma.Middlewares{limitWebhookBody},
		// The items are verified field by field against their signatures,
		// then parsed by the inbox; Huma only hands the body over.
		SkipValidateBody: true,
		Responses: map[string]*huma.Response{
			"200": {
				Description: "Every item is recorded (or was already): " + AdyenAccepted,
				Content: map[string]*huma.MediaType{
					"text/plain": {
						Schema: &huma.Schema{Type: huma.TypeString, Enum: []any{AdyenAccepted}},
						Examples: map[string]*huma.Example{
							"accepted": example("Recorded (or already recorded); Adyen stops retrying", AdyenAccepted),
						},
					},
				},
			},
		},
	}
	h.errorResponses(&op, 400, 404, 413, 500)
	op.Responses["400"].Description = "/problems/webhook-rejected: an item without a signature or with a bad one, or a body that is not a notification. Nothing recorded."
	op.Responses["413"].Description = "The body is larger than 1 MiB. Nothing recorded."
	op.Responses["404"].Description = "Adyen's notifications are not configured (ADYEN_HMAC_KEY unset)."
	huma.Register(h.api, op, h.adyenWebhook)
	registered := h.api.OpenAPI().Paths[op.Path].Post
	// What the body is to the service: a batch of items, each read only
	// once its own signature is verified.
	registered.RequestBody.Content["application/json"].Schema = &huma.Schema{
		Type:        huma.TypeObject,
		Description: "Adyen's standard notification (JSON): one or more items, each signed on its own (additionalData.hmacSignature). Any other body is refused (400).",
		Required:    []string{"notificationItems"},
		Properties: map[string]*huma.Schema{
			"notificationItems": {Type: huma.TypeArray, MinItems: ptr(1), Items: &huma.Schema{
				Type: huma.TypeObject, Required: []string{"NotificationRequestItem"},
			}},
		},
	}
	registered.RequestBody.Content["application/json"].Examples = map[string]*huma.Example{
		"authorisation": example("A payment authorised", json.RawMessage(exampleAdyenNotification)),
	}
}

const exampleAdyenNotification = `{"live":"false","notificationItems":[{"NotificationRequestItem":{` +
	`"additionalData":{"hmacSignature":"coqCmt/IZ4E3CzPvMY8zTjQVL5hYJUiBRg8UU+iCWo0=","metadata.ar_ns":"6f1c0c7e2b7d4f0e9a1b3c5d7e9f1a2b"},` +
	`"amount":{"currency":"EUR","value":1130},"eventCode":"AUTHORISATION","eventDate":"2026-11-25T12:00:00+01:00",` +
	`"merchantAccountCode":"TestMerchant","merchantReference":"TestPayment-1407325143704",` +
	`"pspReference":"7914073381342284","success":"true"}}]}`

func (h *handlers) adyenWebhook(ctx context.Context, in *adyenWebhookInput) (*adyenWebhookOutput, error) {
	if _, err := h.svc.InboxReceive(ctx, service.InboxSourceAdyen, in.RawBody, ""); err != nil {
		return nil, h.fail(ctx, "adyen webhook", err)
	}
	return &adyenWebhookOutput{ContentType: "text/plain; charset=utf-8", Body: []byte(AdyenAccepted)}, nil
}
