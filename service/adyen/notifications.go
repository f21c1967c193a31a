package adyen

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/atomicrides/atomicrides/service"
)

// Adyen's standard notifications (webhooks): a POST whose JSON body holds a
// batch of notification items, each signed on its own with the endpoint's
// HMAC key (additionalData.hmacSignature: base64 HMAC-SHA256, the key given
// in hex, over the item's fields pspReference, originalReference,
// merchantAccountCode, merchantReference, amount value, amount currency,
// eventCode and success, joined by colons, an absent field empty). Adyen
// delivers each item at least once and retries while the endpoint does not
// answer 2xx; the endpoint answers "[accepted]".

// Event codes the service acts on.
const (
	EventAuthorisation           = "AUTHORISATION"
	EventRefund                  = "REFUND"
	EventCancellation            = "CANCELLATION"
	EventTechnicalCancel         = "TECHNICAL_CANCEL"
	EventCapture                 = "CAPTURE"
	EventCaptureFailed           = "CAPTURE_FAILED"
	EventNotificationOfChargebck = "NOTIFICATION_OF_CHARGEBACK"
	EventRequestForInformation   = "REQUEST_FOR_INFORMATION"
	EventChargeback              = "CHARGEBACK"
	EventChargebackReversed      = "CHARGEBACK_REVERSED"
	EventSecondChargeback        = "SECOND_CHARGEBACK"
	EventPrearbitrationWon       = "PREARBITRATION_WON"
	EventPrearbitrationLost      = "PREARBITRATION_LOST"
)

// disputeCodes maps Adyen's dispute event codes to the domain's dispute
// status: a notice or a chargeback opens it (the merchant may still
// defend), a reversal or a won pre-arbitration decides it for us, a second
// chargeback or a lost pre-arbitration for the rider.
var disputeCodes = map[string]service.DisputeStatus{
	EventNotificationOfChargebck: service.DisputeOpen,
	EventRequestForInformation:   service.DisputeOpen,
	EventChargeback:              service.DisputeOpen,
	EventChargebackReversed:      service.DisputeWon,
	EventPrearbitrationWon:       service.DisputeWon,
	EventSecondChargeback:        service.DisputeLost,
	EventPrearbitrationLost:      service.DisputeLost,
}

// Metadata keys of a payment as Adyen repeats them in a notification's
// additionalData.
const (
	notifiedNamespace = "metadata." + metaNamespace
	notifiedRider     = "metadata." + metaRider
	notifiedCapture   = "metadata." + metaCapture
	// captureManual is metaCapture's value on a hold.
	captureManual    = "manual"
	hmacSignatureKey = "hmacSignature"
)

// Notification is Adyen's body of a standard notification.
type Notification struct {
	Live  string             `json:"live"`
	Items []NotificationItem `json:"notificationItems"`
}

// NotificationItem wraps one item of a Notification.
type NotificationItem struct {
	Item json.RawMessage `json:"NotificationRequestItem"`
}

// NotificationRequestItem is one notified event.
type NotificationRequestItem struct {
	AdditionalData      map[string]string `json:"additionalData,omitempty"`
	Amount              Amount            `json:"amount"`
	EventCode           string            `json:"eventCode"`
	EventDate           string            `json:"eventDate"`
	MerchantAccountCode string            `json:"merchantAccountCode"`
	MerchantReference   string            `json:"merchantReference"`
	OriginalReference   string            `json:"originalReference,omitempty"`
	PSPReference        string            `json:"pspReference"`
	Reason              string            `json:"reason,omitempty"`
	Success             string            `json:"success"`
}

// SignedString is the string Adyen signs for an item.
func (it *NotificationRequestItem) SignedString() string {
	return strings.Join([]string{
		it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		strconv.FormatInt(it.Amount.Value, 10), it.Amount.Currency, it.EventCode, it.Success,
	}, ":")
}

// Sign returns the item's HMAC signature under key (raw bytes), as Adyen
// computes it.
func (it *NotificationRequestItem) Sign(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(it.SignedString()))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// EventID is the item's natural id in the inbox: its pspReference, event
// code and success flag. Adyen redelivers an item with the same three, and
// no two different events of one payment share them.
func (it *NotificationRequestItem) EventID() string {
	return it.PSPReference + ":" + it.EventCode + ":" + it.Success
}

// ParseHMACKey decodes an HMAC key as Adyen's Customer Area shows it: hex
// digits, an even number of them (Adyen generates 64).
func ParseHMACKey(s string) ([]byte, error) {
	if len(s) < 32 || len(s)%2 != 0 {
		return nil, errors.New("want an even number (32 or more) of hex digits")
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, errors.New("not hex digits")
	}
	return b, nil
}

// Notifications is the service.EventSource of Adyen's standard
// notifications: it verifies each item's HMAC signature against every
// configured key (several during a rotation: an item verified by any is
// accepted) and parses items into what the domain acts on. Items of
// another merchant account are parsed as foreign.
type Notifications struct {
	keys     [][]byte
	merchant string
}

var _ service.BatchEventSource = (*Notifications)(nil)

// NewNotifications returns the event source of the HMAC keys (hex) of the
// endpoint, for the merchant account the service charges under.
func NewNotifications(hexKeys []string, merchantAccount string) (*Notifications, error) {
	if len(hexKeys) == 0 {
		return nil, errors.New("adyen: at least one HMAC key is required")
	}
	if merchantAccount == "" {
		return nil, errors.New("adyen: the merchant account is required")
	}
	n := &Notifications{merchant: merchantAccount}
	for i, k := range hexKeys {
		b, err := ParseHMACKey(k)
		if err != nil {
			return nil, fmt.Errorf("adyen: HMAC key %d: %w", i+1, err)
		}
		n.keys = append(n.keys, b)
	}
	return n, nil
}

// VerifyBatch checks every item of a delivery and parses each; the
// delivery is refused as a whole when any item is (nothing of it is
// recorded, and Adyen delivers it again). Each message's payload is its
// item's JSON, as received.
func (n *Notifications) VerifyBatch(payload []byte, _ string) ([]service.InboundMessage, error) {
	var body Notification
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&body); err != nil {
		return nil, fmt.Errorf("%w: %v", service.RejectNotAnEvent, err)
	}
	if len(body.Items) == 0 {
		return nil, fmt.Errorf("%w: no notificationItems", service.RejectNotAnEvent)
	}
	out := make([]service.InboundMessage, 0, len(body.Items))
	for i, wrapped := range body.Items {
		it, err := decodeItem(wrapped.Item)
		if err != nil {
			return nil, fmt.Errorf("%w: item %d: %v", service.RejectNotAnEvent, i+1, err)
		}
		if err := n.verify(it); err != nil {
			return nil, fmt.Errorf("%w: item %d", err, i+1)
		}
		ev, err := n.parse(it)
		if err != nil {
			return nil, fmt.Errorf("%w: item %d: %v", service.RejectNotAnEvent, i+1, err)
		}
		out = append(out, service.InboundMessage{Event: ev, Payload: wrapped.Item})
	}
	return out, nil
}

// Verify checks a delivery of exactly one item and parses it.
func (n *Notifications) Verify(payload []byte, signature string) (*service.InboundEvent, error) {
	msgs, err := n.VerifyBatch(payload, signature)
	if err != nil {
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("%w: %d items, want one", service.RejectNotAnEvent, len(msgs))
	}
	return msgs[0].Event, nil
}

// Parse parses one item already verified (an inbox row's payload).
func (n *Notifications) Parse(payload []byte) (*service.InboundEvent, error) {
	it, err := decodeItem(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", service.RejectNotAnEvent, err)
	}
	return n.parse(it)
}

func decodeItem(raw []byte) (*NotificationRequestItem, error) {
	if len(raw) == 0 {
		return nil, errors.New("missing NotificationRequestItem")
	}
	var it NotificationRequestItem
	if err := json.Unmarshal(raw, &it); err != nil {
		return nil, err
	}
	switch {
	case it.PSPReference == "":
		return nil, errors.New("missing pspReference")
	case it.EventCode == "":
		return nil, errors.New("missing eventCode")
	case it.Success != "true" && it.Success != "false":
		return nil, errors.New(`success is neither "true" nor "false"`)
	}
	return &it, nil
}

// verify checks the item's signature against every key.
func (n *Notifications) verify(it *NotificationRequestItem) error {
	sig, err := base64.StdEncoding.DecodeString(it.AdditionalData[hmacSignatureKey])
	if it.AdditionalData[hmacSignatureKey] == "" {
		return service.RejectMissingSignature
	}
	if err != nil {
		return service.RejectBadSignature
	}
	msg := []byte(it.SignedString())
	for _, k := range n.keys {
		m := hmac.New(sha256.New, k)
		m.Write(msg)
		if hmac.Equal(m.Sum(nil), sig) {
			return nil
		}
	}
	return service.RejectBadSignature
}

func (n *Notifications) parse(it *NotificationRequestItem) (*service.InboundEvent, error) {
	created, err := time.Parse(time.RFC3339, it.EventDate)
	if err != nil {
		return nil, fmt.Errorf("eventDate %q: %v", it.EventDate, err)
	}
	ev := &service.InboundEvent{
		ID: it.EventID(), Type: it.EventCode, Created: created.UTC(),
		Kind: service.InboundOther, Processor: service.ProcessorAdyen,
	}
	if it.MerchantAccountCode != n.merchant {
		ev.ForeignAccount = true
		return ev, nil
	}
	success := it.Success == "true"
	switch code := it.EventCode; {
	case code == EventAuthorisation:
		status, failure := service.ChargeSucceeded, ""
		switch {
		case !success:
			status, failure = service.ChargeFailed, "refused"
		case it.AdditionalData[notifiedCapture] == captureManual:
			// A hold: authorized, nothing captured.
			status = service.ChargeAuthorized
		}
		ev.Kind = service.InboundChargeOutcome
		ev.Charge = &service.Charge{
			ID: it.PSPReference, PaymentID: it.PSPReference, AmountCents: it.Amount.Value, Currency: strings.ToLower(it.Amount.Currency),
			Status: status, Created: ev.Created,
			Tag: service.Tag{
				Namespace: it.AdditionalData[notifiedNamespace], Rider: it.AdditionalData[notifiedRider],
				Key: it.MerchantReference,
			},
		}
		if failure != "" {
			ev.Charge.FailureCode, ev.Charge.FailureMessage = failure, it.Reason
		}
		ev.ChargeID, ev.Namespace = it.PSPReference, ev.Charge.Tag.Namespace
	case code == EventCancellation || code == EventTechnicalCancel:
		// The outcome of a cancel: CANCELLATION for a cancel of a payment
		// by its pspReference, TECHNICAL_CANCEL for one by the payment's
		// merchant reference (POST /cancels, which the service sends for a
		// payment still waiting for its shopper). originalReference is the
		// payment; merchantReference is the cancel's reference, which the
		// service makes the payment's key. Cancelled, or not: the payment
		// was decided first (its AUTHORISATION tells how), or is unknown.
		ev.Kind = service.InboundPayment
		ev.Charge = &service.Charge{PaymentID: it.OriginalReference, Status: service.ChargeCanceled, Created: ev.Created,
			Tag: service.Tag{Key: it.MerchantReference}}
		if !success {
			ev.Charge.Status, ev.Charge.FailureCode, ev.Charge.FailureMessage = service.ChargeCancelFailed, code, it.Reason
		}
	case code == EventCapture || code == EventCaptureFailed:
		// The outcome of a capture of a hold (originalReference is the
		// payment): captured, or failed (CAPTURE with success false, or
		// CAPTURE_FAILED when the capture failed after it was made).
		if it.OriginalReference == "" {
			return nil, errors.New(code + " without originalReference")
		}
		ev.Kind = service.InboundCapture
		ev.Charge = &service.Charge{ID: it.PSPReference, PaymentID: it.OriginalReference, Status: service.ChargeSucceeded,
			CapturedCents: it.Amount.Value, AmountCents: it.Amount.Value, Currency: strings.ToLower(it.Amount.Currency),
			Created: ev.Created, Tag: service.Tag{Key: it.MerchantReference}}
		if code == EventCaptureFailed || !success {
			ev.Charge.Status, ev.Charge.FailureCode, ev.Charge.FailureMessage = service.ChargeFailed, code, it.Reason
		}
	case code == EventRefund && success:
		if it.OriginalReference == "" {
			return nil, errors.New("REFUND without originalReference")
		}
		// Adyen's notification is the refund's outcome: the refund is
		// taken on (the money on its way back).
		ev.Kind, ev.ChargeID = service.InboundRefund, it.OriginalReference
		ev.Refund = &service.Refund{
			ID: it.PSPReference, ChargeID: it.OriginalReference, AmountCents: it.Amount.Value,
			Status: service.RefundSucceeded, Created: ev.Created,
		}
	case disputeCodes[code] != "":
		// A dispute names its payment in originalReference (its own
		// pspReference when Adyen sends none).
		charge := it.OriginalReference
		if charge == "" {
			charge = it.PSPReference
		}
		ev.Kind, ev.ChargeID = service.InboundDispute, charge
		ev.Dispute = &service.Dispute{ID: it.PSPReference, ChargeID: charge, Status: disputeCodes[code]}
	}
	return ev, nil
}
