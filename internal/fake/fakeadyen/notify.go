package fakeadyen

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atomicrides/atomicrides/internal/fake/delivery"
)

// DevHMACKey is the HMAC key (hex) of the notification endpoint that
// serve -dev registers with its built-in fake: not a secret, and never a
// real one.
const DevHMACKey = "00fa4e0adbe9000000000000000000000000000000000000000000000000d0e5"

// DevMerchantAccount is the merchant account serve -dev charges under at
// the built-in fake.
const DevMerchantAccount = "AtomicRidesDev"

// Event codes the fake notifies.
const (
	EventAuthorisation      = "AUTHORISATION"
	EventRefund             = "REFUND"
	EventChargeback         = "CHARGEBACK"
	EventChargebackReversed = "CHARGEBACK_REVERSED"
	EventSecondChargeback   = "SECOND_CHARGEBACK"
	// EventCancellation is the outcome of a cancel by the payment's
	// pspReference (POST /payments/{pspReference}/cancels);
	// originalReference names the payment.
	EventCancellation = "CANCELLATION"
	// EventTechnicalCancel is the outcome of a cancel by the payment's
	// merchant reference (POST /cancels); originalReference names the
	// payment found, empty when none was.
	EventTechnicalCancel = "TECHNICAL_CANCEL"
	// EventCapture is the outcome of a capture.
	EventCapture = "CAPTURE"
	// EventCaptureFailed is a capture that failed after Adyen reported it
	// captured (the card scheme rejected it): FailCapture notifies it.
	EventCaptureFailed = "CAPTURE_FAILED"
)

// NotificationEndpoint is where the server sends its standard
// notifications, and how: as Adyen does, each notification item is signed
// with HMACKey (hex; additionalData.hmacSignature) and delivered at least
// once, one item per request, retried with exponential backoff while the
// endpoint fails (a non-2xx answer, no answer within Timeout). The fault
// switches make deliveries harder: Duplicates more deliveries of every
// item, Reorder a random hold of up to Delay (50ms when Delay is zero)
// before each, so that items overtake each other, and Delay a hold before
// each delivery.
type NotificationEndpoint struct {
	URL     string `json:"url"`
	HMACKey string `json:"hmac_key"`
	// Duplicates is how many extra deliveries each item gets.
	Duplicates int  `json:"duplicates,omitempty"`
	Reorder    bool `json:"reorder,omitempty"`
	// Delay holds each delivery this long (Reorder: up to this long).
	Delay time.Duration `json:"delay,omitempty"`
	// Timeout bounds one attempt; default 10 seconds.
	Timeout time.Duration `json:"timeout,omitempty"`
	// RetryBase is the first retry's backoff, doubled per attempt up to
	// RetryMax; defaults 50ms and 5s (Adyen's are minutes; tests cannot
	// wait).
	RetryBase time.Duration `json:"retry_base,omitempty"`
	RetryMax  time.Duration `json:"retry_max,omitempty"`
	// MaxAttempts per delivery; default 100.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// NotificationItem is one notified event, as Adyen's
// NotificationRequestItem.
type NotificationItem struct {
	AdditionalData      map[string]string `json:"additionalData,omitempty"`
	Amount              NotifiedAmount    `json:"amount"`
	EventCode           string            `json:"eventCode"`
	EventDate           string            `json:"eventDate"`
	MerchantAccountCode string            `json:"merchantAccountCode"`
	MerchantReference   string            `json:"merchantReference"`
	OriginalReference   string            `json:"originalReference,omitempty"`
	PSPReference        string            `json:"pspReference"`
	Reason              string            `json:"reason,omitempty"`
	Success             string            `json:"success"`
}

// NotifiedAmount is an item's amount.
type NotifiedAmount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// NotificationDelivery is one attempt to deliver an item.
type NotificationDelivery struct {
	PSPReference string    `json:"psp_reference"`
	EventCode    string    `json:"event_code"`
	At           time.Time `json:"at"`
	// Status is the endpoint's answer, 0 when none came.
	Status int `json:"status"`
}

// SignItem returns the item's HMAC signature under the hex key, computed
// as Adyen documents it: base64 of HMAC-SHA256 over pspReference,
// originalReference, merchantAccountCode, merchantReference, amount value,
// amount currency, eventCode and success, joined by colons.
func SignItem(it NotificationItem, hexKey string) (string, error) {
	key, err := hex.DecodeString(hexKey)
	if err != nil {
		return "", fmt.Errorf("fakeadyen: HMAC key: %w", err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strings.Join([]string{
		it.PSPReference, it.OriginalReference, it.MerchantAccountCode, it.MerchantReference,
		strconv.FormatInt(it.Amount.Value, 10), it.Amount.Currency, it.EventCode, it.Success,
	}, ":")))
	return base64.StdEncoding.EncodeToString(m.Sum(nil)), nil
}

// NotificationBody is the body of a delivery of items, each signed with
// the hex key.
func NotificationBody(hexKey string, items ...NotificationItem) ([]byte, error) {
	type wrapped struct {
		Item NotificationItem `json:"NotificationRequestItem"`
	}
	body := struct {
		Live  string    `json:"live"`
		Items []wrapped `json:"notificationItems"`
	}{Live: "false"}
	for _, it := range items {
		sig, err := SignItem(it, hexKey)
		if err != nil {
			return nil, err
		}
		ad := map[string]string{}
		for k, v := range it.AdditionalData {
			ad[k] = v
		}
		ad["hmacSignature"] = sig
		it.AdditionalData = ad
		body.Items = append(body.Items, wrapped{Item: it})
	}
	return json.Marshal(body)
}

// notifier sends notifications to the endpoint set, each in its own
// goroutine, and keeps every item it made.
type notifier struct {
	once       sync.Once
	mu         sync.Mutex
	endpoint   *NotificationEndpoint
	ctx        context.Context
	cancel     context.CancelFunc
	pending    atomic.Int64
	items      []NotificationItem
	deliveries []NotificationDelivery
	client     *http.Client
}

func (s *Server) notifier() *notifier {
	n := &s.notes
	n.once.Do(func() { n.client = &http.Client{} })
	return n
}

// SetNotificationEndpoint makes the server notify every later event to ep
// (nil stops notifications; those in flight are abandoned).
func (s *Server) SetNotificationEndpoint(ep *NotificationEndpoint) {
	n := s.notifier()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cancel != nil {
		n.cancel()
	}
	n.endpoint, n.ctx, n.cancel = nil, nil, nil
	if ep == nil {
		return
	}
	e := *ep
	if e.Timeout <= 0 {
		e.Timeout = 10 * time.Second
	}
	if e.RetryBase <= 0 {
		e.RetryBase = 50 * time.Millisecond
	}
	if e.RetryMax <= 0 {
		e.RetryMax = 5 * time.Second
	}
	if e.MaxAttempts <= 0 {
		e.MaxAttempts = 100
	}
	n.endpoint = &e
	n.ctx, n.cancel = context.WithCancel(context.Background())
}

// NotificationItems returns every item the server made, oldest first
// (without signatures).
func (s *Server) NotificationItems() []NotificationItem {
	n := s.notifier()
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]NotificationItem(nil), n.items...)
}

// Renotify delivers every item made so far again, as the Customer Area's
// "resend" would.
func (s *Server) Renotify() {
	n := s.notifier()
	for _, it := range s.NotificationItems() {
		n.send(it)
	}
}

// NotificationsIdle waits until no delivery is pending (each answered 2xx
// or given up), or ctx ends.
func (s *Server) NotificationsIdle(ctx context.Context) error {
	n := s.notifier()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for n.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// NotificationDeliveries returns every delivery attempt so far, in order.
func (s *Server) NotificationDeliveries() []NotificationDelivery {
	n := s.notifier()
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]NotificationDelivery(nil), n.deliveries...)
}

// Dispute notifies a dispute event (EventChargeback,
// EventChargebackReversed, EventSecondChargeback) of the authorised
// payment pspRef, as Adyen does when the shopper's bank disputes it.
func (s *Server) Dispute(pspRef, eventCode string) error {
	s.mu.Lock()
	var pay *Payment
	for _, p := range s.payments {
		if p.PSPReference == pspRef && p.Authorised() {
			pay = p
		}
	}
	var ref string
	if pay != nil {
		ref = s.newRef()
	}
	s.mu.Unlock()
	if pay == nil {
		return fmt.Errorf("fakeadyen: no authorised payment %s", pspRef)
	}
	s.notifier().notify(NotificationItem{
		Amount: NotifiedAmount{Currency: pay.Currency, Value: pay.AmountValue}, EventCode: eventCode,
		MerchantAccountCode: pay.MerchantAccount, MerchantReference: pay.Reference,
		OriginalReference: pay.PSPReference, PSPReference: ref, Reason: "Fraudulent transaction", Success: "true",
	})
	return nil
}

// DashboardRefund refunds the authorised payment pspRef in full outside
// the API (the Customer Area), and notifies it.
func (s *Server) DashboardRefund(pspRef string) (Refund, error) {
	s.mu.Lock()
	var pay *Payment
	for _, p := range s.payments {
		if p.PSPReference == pspRef && p.Authorised() {
			pay = p
		}
	}
	if pay == nil {
		s.mu.Unlock()
		return Refund{}, fmt.Errorf("fakeadyen: no authorised payment %s", pspRef)
	}
	r := &Refund{PSPReference: s.newRef(), PaymentPSPReference: pspRef, AmountValue: pay.AmountValue,
		Currency: pay.Currency, Created: s.Now().UTC()}
	s.refunds = append(s.refunds, r)
	s.mu.Unlock()
	s.notifyRefund(r, pay.MerchantAccount)
	return *r, nil
}

// notifyPayment notifies the AUTHORISATION of a payment (success or not).
func (s *Server) notifyPayment(p *Payment) {
	ad := map[string]string{}
	for k, v := range p.Metadata {
		ad["metadata."+k] = v
	}
	ad["shopperReference"] = p.ShopperReference
	success, reason := "true", ""
	if !p.Authorised() {
		success, reason = "false", p.RefusalReason
	}
	s.notifier().notify(NotificationItem{
		AdditionalData: ad, Amount: NotifiedAmount{Currency: p.Currency, Value: p.AmountValue},
		EventCode: EventAuthorisation, EventDate: p.Created.Format(time.RFC3339),
		MerchantAccountCode: p.MerchantAccount, MerchantReference: p.Reference, PSPReference: p.PSPReference,
		Reason: reason, Success: success,
	})
}

// notifyRefund notifies the REFUND of a refund (Adyen settles it and
// reports success).
func (s *Server) notifyRefund(r *Refund, merchant string) {
	s.notifier().notify(NotificationItem{
		Amount: NotifiedAmount{Currency: r.Currency, Value: r.AmountValue}, EventCode: EventRefund,
		EventDate: r.Created.Format(time.RFC3339), MerchantAccountCode: merchant, MerchantReference: r.Reference,
		OriginalReference: r.PaymentPSPReference, PSPReference: r.PSPReference, Success: "true",
	})
}

// notifyModification notifies the outcome of the cancel or capture m
// under eventCode: success or not (with the reason), originalReference the
// payment's pspReference (empty when there was no such payment).
func (s *Server) notifyModification(m *Modification, eventCode string) {
	success := "false"
	if m.Success {
		success = "true"
	}
	s.notifier().notify(NotificationItem{
		Amount: NotifiedAmount{Currency: m.Currency, Value: m.AmountValue}, EventCode: eventCode,
		EventDate: m.Created.Format(time.RFC3339), MerchantAccountCode: m.MerchantAccount, MerchantReference: m.Reference,
		OriginalReference: m.PaymentPSPReference, PSPReference: m.PSPReference, Reason: m.Reason, Success: success,
	})
}

// notify keeps the item and sends it.
func (n *notifier) notify(it NotificationItem) {
	if it.EventDate == "" {
		it.EventDate = time.Now().UTC().Format(time.RFC3339)
	}
	n.mu.Lock()
	n.items = append(n.items, it)
	n.mu.Unlock()
	n.send(it)
}

func (n *notifier) send(it NotificationItem) {
	n.mu.Lock()
	ep, ctx := n.endpoint, n.ctx
	n.mu.Unlock()
	if ep == nil {
		return
	}
	for range 1 + ep.Duplicates {
		n.pending.Add(1)
		go func() {
			defer n.pending.Add(-1)
			n.deliver(ctx, ep, it)
		}()
	}
}

// deliver makes the attempts of one delivery.
func (n *notifier) deliver(ctx context.Context, ep *NotificationEndpoint, it NotificationItem) {
	delivery.Deliver(ctx, delivery.Schedule{Delay: ep.Delay, Reorder: ep.Reorder,
		RetryBase: ep.RetryBase, RetryMax: ep.RetryMax, MaxAttempts: ep.MaxAttempts},
		func(ctx context.Context) int { return n.attempt(ctx, ep, it) })
}

// attempt posts the item once and returns the status (0 for no answer).
func (n *notifier) attempt(ctx context.Context, ep *NotificationEndpoint, it NotificationItem) int {
	status := 0
	if body, err := NotificationBody(ep.HMACKey, it); err == nil {
		header := http.Header{}
		header.Set("Content-Type", "application/json")
		header.Set("User-Agent", "Adyen HttpClient 1.0")
		status = delivery.Post(ctx, n.client, ep.URL, header, body, ep.Timeout)
	}
	n.mu.Lock()
	n.deliveries = append(n.deliveries, NotificationDelivery{PSPReference: it.PSPReference, EventCode: it.EventCode, At: time.Now(), Status: status})
	n.mu.Unlock()
	return status
}
