package fakeadyen

import (
	"fmt"
	"net/http"
	"time"
)

// Modifications: cancels and captures. As at Adyen, the API only takes a
// modification on (201, status "received"); its outcome is told by a
// notification (CANCELLATION, CAPTURE), success true or false. The fake
// decides the outcome when the request arrives, so a payment cancelled
// here cannot be authorised by its challenge page afterwards; only the
// notification comes later.

// Kinds of modifications.
const (
	ModificationCancel  = "cancel"
	ModificationCapture = "capture"
)

// Reasons of modifications that failed.
const (
	reasonUnknownPayment         = "Unknown payment"
	reasonAlreadyAuthorised      = "Payment already authorised"
	reasonAlreadyCaptured        = "Payment already captured"
	reasonAlreadyRefused         = "Payment already refused"
	reasonNotAuthorised          = "Payment not authorised"
	reasonCurrencyMismatch       = "Currency of the capture does not match the payment's"
	reasonInsufficientAuthorised = "Insufficient balance on payment"
	// ReasonCaptureRejected is FailCapture's reason when it is given none.
	ReasonCaptureRejected = "Capture rejected by the card scheme"
)

// Modification is a cancel or a capture in the ledger, with its outcome.
type Modification struct {
	// PSPReference is the modification's own reference.
	PSPReference string
	// Kind is ModificationCancel or ModificationCapture.
	Kind string
	// PaymentPSPReference is the payment's pspReference, empty when no
	// payment was found; PaymentReference the merchant reference a cancel
	// by reference (POST /cancels) named.
	PaymentPSPReference string
	PaymentReference    string
	// Reference is the modification's merchant reference.
	Reference       string
	MerchantAccount string
	// AmountValue and Currency: a capture's amount; a cancel's is the
	// payment's.
	AmountValue int64
	Currency    string
	Success     bool
	// Reason is why the modification failed.
	Reason  string
	Created time.Time
}

// Modifications returns every cancel and capture, oldest first.
func (s *Server) Modifications() []Modification {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Modification, len(s.mods))
	for i, m := range s.mods {
		out[i] = *m
	}
	return out
}

// paymentByPSPLocked is the payment pspRef, nil when none; mu is held.
func (s *Server) paymentByPSPLocked(pspRef string) *Payment {
	for _, p := range s.payments {
		if p.PSPReference == pspRef {
			return p
		}
	}
	return nil
}

// paymentByReferenceLocked is the payment a cancel by merchant reference
// names: of the merchant account's payments under reference, one waiting
// for authentication, else the latest; nil when none. mu is held.
func (s *Server) paymentByReferenceLocked(merchant, reference string) *Payment {
	var found *Payment
	for _, p := range s.payments {
		if p.MerchantAccount != merchant || p.Reference != reference {
			continue
		}
		if found == nil || !found.AwaitingAuthentication() {
			found = p
		}
	}
	return found
}

// cancelRequestLocked answers POST /cancels (pspRef empty: by the
// payment's merchant reference) and POST /payments/{pspRef}/cancels; mu is
// held.
func (s *Server) cancelRequestLocked(req *request, pspRef string, now time.Time) answer {
	var pay *Payment
	if pspRef == "" {
		if req.PaymentReference == "" {
			return errorAnswer(http.StatusUnprocessableEntity, "130", "validation", "Required field 'paymentReference' is not provided.")
		}
		pay = s.paymentByReferenceLocked(req.MerchantAccount, req.PaymentReference)
	} else if pay = s.paymentByPSPLocked(pspRef); pay == nil {
		return errorAnswer(http.StatusUnprocessableEntity, "167", "validation", "Original pspReference required for this operation")
	}
	m := &Modification{PSPReference: s.newRef(), Kind: ModificationCancel, PaymentReference: req.PaymentReference,
		Reference: req.Reference, MerchantAccount: req.MerchantAccount, Created: now}
	event := EventCancellation
	if pspRef == "" {
		event = EventTechnicalCancel
	}
	s.cancelLocked(pay, m, event)
	resp := map[string]any{"status": "received", "pspReference": m.PSPReference, "reference": req.Reference,
		"merchantAccount": m.MerchantAccount}
	if pspRef == "" {
		resp["paymentReference"] = m.PaymentReference
	} else {
		resp["paymentPspReference"] = pspRef
	}
	return jsonAnswer(http.StatusCreated, resp)
}

// cancelLocked decides the cancel m of pay (nil: no such payment), records
// it and notifies its outcome under event (CANCELLATION for a cancel by
// pspReference, TECHNICAL_CANCEL for one by merchant reference); mu is
// held. A payment waiting for
// authentication, or an authorisation held for a manual capture and not
// captured, is cancelled; a payment already cancelled stays so (the cancel
// succeeds); any other is left as it is and the cancel fails.
func (s *Server) cancelLocked(pay *Payment, m *Modification, event string) {
	if m.Reference == "" {
		m.Reference = m.PaymentReference
	}
	if pay != nil {
		m.PaymentPSPReference, m.AmountValue, m.Currency = pay.PSPReference, pay.AmountValue, pay.Currency
		if m.Reference == "" {
			m.Reference = pay.Reference
		}
	}
	switch {
	case pay == nil:
		m.Reason = reasonUnknownPayment
	case pay.AwaitingAuthentication(), pay.ResultCode == ResultCancelled,
		pay.Authorised() && pay.ManualCapture && pay.CapturedValue == 0:
		pay.ResultCode, m.Success = ResultCancelled, true
	case pay.Authorised() && pay.ManualCapture:
		m.Reason = reasonAlreadyCaptured
	case pay.Authorised():
		m.Reason = reasonAlreadyAuthorised
	default:
		m.Reason = reasonAlreadyRefused
	}
	s.mods = append(s.mods, m)
	s.notifyModification(m, event)
}

// captureRequestLocked answers POST /payments/{pspRef}/captures: a
// manual-capture authorisation captured once, up to its amount (the rest
// released); mu is held.
func (s *Server) captureRequestLocked(req *request, pspRef string, now time.Time) answer {
	pay := s.paymentByPSPLocked(pspRef)
	if pay == nil {
		return errorAnswer(http.StatusUnprocessableEntity, "167", "validation", "Original pspReference required for this operation")
	}
	if req.Amount.Value <= 0 || req.Amount.Currency == "" {
		return errorAnswer(http.StatusUnprocessableEntity, "137", "validation", "Invalid amount specified")
	}
	m := &Modification{PSPReference: s.newRef(), Kind: ModificationCapture, PaymentPSPReference: pspRef,
		Reference: req.Reference, MerchantAccount: req.MerchantAccount, AmountValue: req.Amount.Value,
		Currency: req.Amount.Currency, Created: now}
	if m.Reference == "" {
		m.Reference = pay.Reference
	}
	switch {
	case !pay.Authorised():
		m.Reason = reasonNotAuthorised
	case !pay.ManualCapture || pay.CapturedValue > 0:
		m.Reason = reasonAlreadyCaptured
	case m.Currency != pay.Currency:
		m.Reason = reasonCurrencyMismatch
	case m.AmountValue > pay.AmountValue:
		m.Reason = reasonInsufficientAuthorised
	default:
		pay.CapturedValue, m.Success = m.AmountValue, true
	}
	s.mods = append(s.mods, m)
	s.notifyModification(m, EventCapture)
	return jsonAnswer(http.StatusCreated, map[string]any{"status": "received", "pspReference": m.PSPReference,
		"paymentPspReference": pspRef, "reference": req.Reference, "merchantAccount": m.MerchantAccount,
		"amount": map[string]any{"currency": m.Currency, "value": m.AmountValue}})
}

// FailCapture fails, after the fact, a capture that succeeded, as a card
// scheme's rejection does at Adyen: pspRef names the capture (its own
// pspReference) or its payment. The capture is recorded as failed
// (Success false, with reason; an empty reason is ReasonCaptureRejected),
// nothing of the payment stays captured (CapturedValue 0: the
// authorisation is held again), and a CAPTURE_FAILED notification
// (EventCaptureFailed, success "true" as Adyen sends it) names the capture
// (pspReference) and the payment (originalReference), with the capture's
// amount and reason. It returns the capture as recorded now; an error when
// no successful capture matches pspRef.
func (s *Server) FailCapture(pspRef, reason string) (Modification, error) {
	if reason == "" {
		reason = ReasonCaptureRejected
	}
	s.mu.Lock()
	var m *Modification
	for _, c := range s.mods {
		if c.Kind == ModificationCapture && c.Success && (c.PSPReference == pspRef || c.PaymentPSPReference == pspRef) {
			m = c
		}
	}
	if m == nil {
		s.mu.Unlock()
		return Modification{}, fmt.Errorf("fakeadyen: no successful capture %s", pspRef)
	}
	if pay := s.paymentByPSPLocked(m.PaymentPSPReference); pay != nil {
		pay.CapturedValue = 0
	}
	m.Success, m.Reason = false, reason
	out := *m
	s.mu.Unlock()
	s.notifier().notify(NotificationItem{
		Amount: NotifiedAmount{Currency: out.Currency, Value: out.AmountValue}, EventCode: EventCaptureFailed,
		EventDate: s.Now().UTC().Format(time.RFC3339), MerchantAccountCode: out.MerchantAccount,
		MerchantReference: out.Reference, OriginalReference: out.PaymentPSPReference, PSPReference: out.PSPReference,
		Reason: reason, Success: "true",
	})
	return out, nil
}
