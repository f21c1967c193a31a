package fakestripe

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// PaymentIntent statuses, as in Stripe's PaymentIntent.status.
// PaymentIntentProcessing is listed for completeness: cards never stay in
// it here.
const (
	PaymentIntentRequiresPaymentMethod = "requires_payment_method"
	PaymentIntentRequiresConfirmation  = "requires_confirmation"
	PaymentIntentRequiresAction        = "requires_action"
	PaymentIntentProcessing            = "processing"
	PaymentIntentRequiresCapture       = "requires_capture"
	PaymentIntentSucceeded             = "succeeded"
	PaymentIntentCanceled              = "canceled"
)

// Capture methods of a PaymentIntent.
const (
	CaptureAutomatic = "automatic"
	CaptureManual    = "manual"
)

// PaymentIntent is a PaymentIntent as recorded by the server.
type PaymentIntent struct {
	ID       string `json:"id"`
	Customer string `json:"customer,omitempty"`
	Amount   int64  `json:"amount"`
	// AmountCapturable is what a capture may take while the PaymentIntent
	// is in requires_capture; AmountReceived what it collected.
	AmountCapturable int64  `json:"amount_capturable"`
	AmountReceived   int64  `json:"amount_received"`
	Currency         string `json:"currency"`
	Description      string `json:"description,omitempty"`
	// Status is one of the PaymentIntent… statuses.
	Status string `json:"status"`
	// CaptureMethod is CaptureAutomatic or CaptureManual.
	CaptureMethod      string   `json:"capture_method"`
	PaymentMethodTypes []string `json:"payment_method_types"`
	// PaymentMethod is the payment method being confirmed, or that paid:
	// a card of the customer (card_…) or a test payment method (pm_…).
	// Stripe clears it when a payment fails; LastPaymentError names it.
	PaymentMethod string `json:"payment_method,omitempty"`
	ClientSecret  string `json:"client_secret"`
	// ReturnURL is where the challenge page sends the rider back to.
	ReturnURL string `json:"return_url,omitempty"`
	// ChallengeURL is the page the rider authenticates on, set while the
	// PaymentIntent requires action (next_action.redirect_to_url.url).
	ChallengeURL string `json:"challenge_url,omitempty"`
	// LatestCharge is the id of the last charge attempt made, if any.
	LatestCharge string `json:"latest_charge,omitempty"`
	// LastPaymentError is why the last confirmation failed; nil after a
	// success or before any failure.
	LastPaymentError   *PaymentError     `json:"last_payment_error,omitempty"`
	CancellationReason string            `json:"cancellation_reason,omitempty"`
	CanceledAt         time.Time         `json:"canceled_at,omitzero"`
	Metadata           map[string]string `json:"metadata"`
	Created            time.Time         `json:"created"`
}

// PaymentError is a PaymentIntent's last_payment_error.
type PaymentError struct {
	Type          string `json:"type"`
	Code          string `json:"code"`
	DeclineCode   string `json:"decline_code,omitempty"`
	Message       string `json:"message"`
	Charge        string `json:"charge,omitempty"`
	PaymentMethod string `json:"payment_method,omitempty"`
}

func (pi *PaymentIntent) clone() PaymentIntent {
	out := *pi
	out.Metadata = maps.Clone(pi.Metadata)
	out.PaymentMethodTypes = slices.Clone(pi.PaymentMethodTypes)
	if pi.LastPaymentError != nil {
		e := *pi.LastPaymentError
		out.LastPaymentError = &e
	}
	return out
}

// PaymentIntents returns every PaymentIntent, in creation order.
func (s *Server) PaymentIntents() []PaymentIntent {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return filterClone(s.ledger.paymentIntents, all, (*PaymentIntent).clone)
}

// PaymentIntent returns the PaymentIntent id as it is now.
func (s *Server) PaymentIntent(id string) (PaymentIntent, bool) {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	pi, ok := s.ledger.paymentIntentLocked(id)
	if !ok {
		return PaymentIntent{}, false
	}
	return pi.clone(), true
}

func (l *ledger) paymentIntentLocked(id string) (*PaymentIntent, bool) {
	pi, ok := l.byID[id].(*PaymentIntent)
	return pi, ok
}

func (l *ledger) addPaymentIntentLocked(pi *PaymentIntent) {
	l.paymentIntents = append(l.paymentIntents, pi)
	l.byID[pi.ID] = pi
}

// paymentIntentObject is the JSON shape of a PaymentIntent (API version
// 2023-10-16: latest_charge, no charges list).
type paymentIntentObject struct {
	ID                        string              `json:"id"`
	Object                    string              `json:"object"`
	Amount                    int64               `json:"amount"`
	AmountCapturable          int64               `json:"amount_capturable"`
	AmountReceived            int64               `json:"amount_received"`
	Application               *string             `json:"application"`
	ApplicationFeeAmount      *int64              `json:"application_fee_amount"`
	AutomaticPaymentMethods   *struct{}           `json:"automatic_payment_methods"`
	CanceledAt                *int64              `json:"canceled_at"`
	CancellationReason        *string             `json:"cancellation_reason"`
	CaptureMethod             string              `json:"capture_method"`
	ClientSecret              string              `json:"client_secret"`
	ConfirmationMethod        string              `json:"confirmation_method"`
	Created                   int64               `json:"created"`
	Currency                  string              `json:"currency"`
	Customer                  *string             `json:"customer"`
	Description               *string             `json:"description"`
	Invoice                   *string             `json:"invoice"`
	LastPaymentError          *paymentErrorObject `json:"last_payment_error"`
	LatestCharge              *string             `json:"latest_charge"`
	Livemode                  bool                `json:"livemode"`
	Metadata                  map[string]string   `json:"metadata"`
	NextAction                *nextActionObject   `json:"next_action"`
	OnBehalfOf                *string             `json:"on_behalf_of"`
	PaymentMethod             *string             `json:"payment_method"`
	PaymentMethodTypes        []string            `json:"payment_method_types"`
	Processing                *struct{}           `json:"processing"`
	ReceiptEmail              *string             `json:"receipt_email"`
	Review                    *string             `json:"review"`
	SetupFutureUsage          *string             `json:"setup_future_usage"`
	Shipping                  *struct{}           `json:"shipping"`
	Source                    *string             `json:"source"`
	StatementDescriptor       *string             `json:"statement_descriptor"`
	StatementDescriptorSuffix *string             `json:"statement_descriptor_suffix"`
	Status                    string              `json:"status"`
	TransferData              *struct{}           `json:"transfer_data"`
	TransferGroup             *string             `json:"transfer_group"`
}

// paymentErrorObject is the JSON shape of last_payment_error.
type paymentErrorObject struct {
	Charge        string               `json:"charge,omitempty"`
	Code          string               `json:"code"`
	DeclineCode   string               `json:"decline_code,omitempty"`
	DocURL        string               `json:"doc_url"`
	Message       string               `json:"message"`
	PaymentMethod *paymentMethodObject `json:"payment_method,omitempty"`
	Type          string               `json:"type"`
}

// paymentMethodObject is the JSON shape of a card payment method, as
// embedded in payment errors.
type paymentMethodObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	BillingDetails billingDetails    `json:"billing_details"`
	Created        int64             `json:"created"`
	Customer       *string           `json:"customer"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Type           string            `json:"type"`
}

type billingDetails struct {
	Address *struct{} `json:"address"`
	Email   *string   `json:"email"`
	Name    *string   `json:"name"`
	Phone   *string   `json:"phone"`
}

type nextActionObject struct {
	Type          string               `json:"type"`
	RedirectToURL *redirectToURLObject `json:"redirect_to_url"`
}

type redirectToURLObject struct {
	ReturnURL string `json:"return_url"`
	URL       string `json:"url"`
}

// docURL is the documentation page of an error code.
func docURL(code string) string {
	return "https://stripe.com/docs/error-codes/" + strings.ReplaceAll(code, "_", "-")
}

func (pi *PaymentIntent) paymentMethodObject(id string) *paymentMethodObject {
	if id == "" {
		return nil
	}
	return &paymentMethodObject{
		ID: id, Object: "payment_method", Created: unix(pi.Created), Customer: nullable(pi.Customer),
		Metadata: map[string]string{}, Type: "card",
	}
}

func (pi *PaymentIntent) object() paymentIntentObject {
	o := paymentIntentObject{
		ID:                 pi.ID,
		Object:             "payment_intent",
		Amount:             pi.Amount,
		AmountCapturable:   pi.AmountCapturable,
		AmountReceived:     pi.AmountReceived,
		CancellationReason: nullable(pi.CancellationReason),
		CaptureMethod:      pi.CaptureMethod,
		ClientSecret:       pi.ClientSecret,
		ConfirmationMethod: "automatic",
		Created:            unix(pi.Created),
		Currency:           pi.Currency,
		Customer:           nullable(pi.Customer),
		Description:        nullable(pi.Description),
		LatestCharge:       nullable(pi.LatestCharge),
		Metadata:           metadataOrEmpty(pi.Metadata),
		PaymentMethod:      nullable(pi.PaymentMethod),
		PaymentMethodTypes: slices.Clone(pi.PaymentMethodTypes),
		Status:             pi.Status,
	}
	if o.PaymentMethodTypes == nil {
		o.PaymentMethodTypes = []string{}
	}
	if !pi.CanceledAt.IsZero() {
		at := unix(pi.CanceledAt)
		o.CanceledAt = &at
	}
	if e := pi.LastPaymentError; e != nil {
		o.LastPaymentError = &paymentErrorObject{
			Charge: e.Charge, Code: e.Code, DeclineCode: e.DeclineCode, DocURL: docURL(e.Code),
			Message: e.Message, PaymentMethod: pi.paymentMethodObject(e.PaymentMethod), Type: e.Type,
		}
	}
	if pi.Status == PaymentIntentRequiresAction {
		o.NextAction = &nextActionObject{Type: "redirect_to_url",
			RedirectToURL: &redirectToURLObject{ReturnURL: pi.ReturnURL, URL: pi.ChallengeURL}}
	}
	return o
}
