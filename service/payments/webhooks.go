package payments

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/atomicrides/atomicrides/service"
)

// DefaultWebhookTolerance is how old a signature's timestamp may be:
// stripe-go's default, five minutes. Stripe signs each delivery attempt
// anew, so a retried delivery is never stale; a replayed one is.
const DefaultWebhookTolerance = webhook.DefaultTolerance

// Events is the service.EventSource of Stripe's webhook events: it
// verifies the Stripe-Signature header with stripe-go's webhook package
// against each configured signing secret (several during a rotation: a
// delivery verified by any is accepted), and parses events into what the
// domain acts on.
type Events struct {
	secrets   []string
	tolerance time.Duration
}

// NewEvents returns the event source of the endpoint signing secrets
// ("whsec_…"), tried in order. A zero tolerance is DefaultWebhookTolerance.
func NewEvents(secrets []string, tolerance time.Duration) (*Events, error) {
	if len(secrets) == 0 {
		return nil, errors.New("payments: at least one webhook signing secret is required")
	}
	for _, s := range secrets {
		if s == "" {
			return nil, errors.New("payments: empty webhook signing secret")
		}
	}
	if tolerance == 0 {
		tolerance = DefaultWebhookTolerance
	}
	return &Events{secrets: secrets, tolerance: tolerance}, nil
}

// Verify checks the Stripe-Signature header of a delivery and parses it.
// The refusal names the first reason that holds for every secret: a
// signature that no secret verifies is bad, and a verified one that is too
// old is stale.
func (e *Events) Verify(payload []byte, signature string) (*service.InboundEvent, error) {
	if strings.TrimSpace(signature) == "" {
		return nil, service.RejectMissingSignature
	}
	reason := service.RejectBadSignature
	for _, secret := range e.secrets {
		// The event's API version may differ from stripe-go's: the fields
		// read here are the same in every version the service supports.
		_, err := webhook.ConstructEventWithOptions(payload, signature, secret, webhook.ConstructEventOptions{
			Tolerance: e.tolerance, IgnoreAPIVersionMismatch: true,
		})
		switch {
		case err == nil:
			return e.parse(payload, service.RejectNotAnEvent)
		case errors.Is(err, webhook.ErrNotSigned):
			return nil, service.RejectMissingSignature
		case errors.Is(err, webhook.ErrTooOld):
			// Checked before the signature: stale only if this secret
			// verifies it.
			if webhook.ValidatePayloadIgnoringTolerance(payload, signature, secret) == nil {
				reason = service.RejectStaleTimestamp
			}
		case errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrInvalidHeader):
		default:
			// Verified, but the body is not JSON.
			return nil, fmt.Errorf("%w: %v", service.RejectNotAnEvent, err)
		}
	}
	return nil, reason
}

// Parse parses an event already verified.
func (e *Events) Parse(payload []byte) (*service.InboundEvent, error) {
	return e.parse(payload, service.RejectNotAnEvent)
}

func (e *Events) parse(payload []byte, bad error) (*service.InboundEvent, error) {
	var ev stripe.Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, fmt.Errorf("%w: %v", bad, err)
	}
	if ev.ID == "" || ev.Type == "" || ev.Object != "event" || ev.Data == nil || len(ev.Data.Raw) == 0 {
		return nil, fmt.Errorf("%w: missing id, type, object or data", bad)
	}
	out := &service.InboundEvent{
		ID:      ev.ID,
		Type:    string(ev.Type),
		Created: unixTime(ev.Created),
		Kind:    service.InboundOther,
	}
	raw := ev.Data.Raw
	var err error
	switch t := string(ev.Type); {
	case t == "charge.succeeded" || t == "charge.failed":
		var ch stripe.Charge
		if err = json.Unmarshal(raw, &ch); err == nil {
			out.Kind, out.Charge, out.ChargeID = service.InboundChargeOutcome, toCharge(&ch), ch.ID
			out.Namespace = out.Charge.Tag.Namespace
		}
	case t == "charge.expired" || t == "charge.captured":
		// A hold released by Stripe itself (its expiry), or captured: the
		// charge names its PaymentIntent, whose tag it carries.
		var ch stripe.Charge
		if err = json.Unmarshal(raw, &ch); err == nil {
			c := toCharge(&ch)
			if ch.PaymentIntent != nil {
				c.PaymentID = ch.PaymentIntent.ID
			}
			out.Kind, out.ChargeID, out.Namespace = service.InboundPayment, ch.ID, c.Tag.Namespace
			if t == "charge.expired" {
				c.Status = service.ChargeCanceled
			} else {
				out.Kind, c.Status, c.CapturedCents = service.InboundCapture, service.ChargeSucceeded, ch.AmountCaptured
			}
			out.Charge = c
		}
	case t == "payment_intent.succeeded" || t == "payment_intent.payment_failed" || t == "payment_intent.canceled" ||
		t == "payment_intent.amount_capturable_updated":
		var pi stripe.PaymentIntent
		if err = json.Unmarshal(raw, &pi); err == nil {
			if pi.ID == "" {
				return nil, fmt.Errorf("%w: %s names no payment intent", bad, ev.Type)
			}
			out.Kind, out.Charge = service.InboundPayment, fromIntent(&pi)
			out.ChargeID, out.Namespace = out.Charge.ID, out.Charge.Tag.Namespace
		}
	case t == "charge.refunded":
		var ch stripe.Charge
		if err = json.Unmarshal(raw, &ch); err == nil {
			out.Kind, out.ChargeID, out.Namespace = service.InboundRefund, ch.ID, tagOf(ch.Metadata).Namespace
			if ch.Status == stripe.ChargeStatusSucceeded && !ch.Captured {
				// A charge never captured took no money: what Stripe
				// shows refunded is its hold, released (its
				// PaymentIntent cancelled, or the hold lapsed). The
				// event is read as charge.expired is, never as a refund.
				c := toCharge(&ch)
				c.Status = service.ChargeCanceled
				out.Kind, out.Charge = service.InboundPayment, c
			}
		}
	case strings.HasPrefix(t, "refund.") || strings.HasPrefix(t, "charge.refund."):
		var r stripe.Refund
		if err = json.Unmarshal(raw, &r); err == nil {
			out.Kind, out.Refund = service.InboundRefund, toRefund(&r, "")
			out.ChargeID = out.Refund.ChargeID
			// A refund made in the dashboard carries no tag; its charge
			// tells whose it is.
			out.Namespace = out.Refund.Tag.Namespace
		}
	case strings.HasPrefix(t, "charge.dispute."):
		var d stripe.Dispute
		if err = json.Unmarshal(raw, &d); err == nil {
			out.Kind = service.InboundDispute
			out.Dispute = &service.Dispute{ID: d.ID, Status: disputeStatus(d.Status)}
			if d.Charge != nil {
				out.Dispute.ChargeID = d.Charge.ID
			}
			out.ChargeID = out.Dispute.ChargeID
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s object: %v", bad, ev.Type, err)
	}
	if out.Kind != service.InboundOther && out.Kind != service.InboundPayment && out.ChargeID == "" {
		return nil, fmt.Errorf("%w: %s names no charge", bad, ev.Type)
	}
	return out, nil
}

// disputeStatus reads Stripe's dispute status: won (and an inquiry closed
// without a chargeback) keeps the money, lost (and a charge refunded while
// disputed) does not; every other status is a dispute still open.
func disputeStatus(s stripe.DisputeStatus) service.DisputeStatus {
	switch s {
	case stripe.DisputeStatusWon, stripe.DisputeStatusWarningClosed:
		return service.DisputeWon
	case stripe.DisputeStatusLost, "charge_refunded":
		return service.DisputeLost
	}
	return service.DisputeOpen
}
