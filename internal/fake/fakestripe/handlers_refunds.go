package fakestripe

import (
	"fmt"
	"net/http"
	"slices"
)

// refundCreate is POST /v1/refunds: refunds the rest of the charge, or
// amount of it. The charge is named by charge, or by payment_intent (its
// latest charge, once the PaymentIntent succeeded), or by both.
func (c *call) refundCreate() response {
	if bad, ok := rejectUnknown(c.params, "charge", "payment_intent", "amount", "reason", "metadata", "expand"); ok {
		return bad
	}
	chargeID, intentID := c.params.Get("charge"), c.params.Get("payment_intent")
	if chargeID == "" && intentID == "" {
		return missingParam("charge")
	}
	amount, present, bad, ok := intParam(c.params, "amount")
	switch {
	case !ok:
		return bad
	case present && amount < 1:
		return invalidParam("parameter_invalid_integer", "amount", "This value must be greater than or equal to 1.")
	}

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if intentID != "" {
		pi, ok := l.paymentIntentLocked(intentID)
		if !ok {
			return noSuchObject(http.StatusBadRequest, "payment_intent", "payment_intent", intentID)
		}
		if bad, ok := refundableIntent(pi, chargeID); !ok {
			return bad
		}
		chargeID = pi.LatestCharge
	}
	ch, ok := l.chargeLocked(chargeID)
	if !ok {
		return noSuchObject(http.StatusBadRequest, "charge", "charge", chargeID)
	}
	if ch.Status == ChargeSucceeded && ch.Uncaptured {
		return executedError(http.StatusBadRequest, apiError{
			Type:  typeInvalidRequest,
			Code:  "charge_not_refundable",
			Param: "charge",
			Message: fmt.Sprintf("Charge %s has not been captured: cancel its PaymentIntent %s to release it.",
				ch.ID, ch.PaymentIntent),
		})
	}
	if ch.Status != ChargeSucceeded {
		return executedError(http.StatusBadRequest, apiError{
			Type:    typeInvalidRequest,
			Code:    "charge_not_refundable",
			Param:   "charge",
			Message: fmt.Sprintf("Charge %s has failed and cannot be refunded.", ch.ID),
		})
	}
	remaining := ch.Amount - ch.AmountRefunded
	if remaining == 0 {
		return executedError(http.StatusBadRequest, apiError{
			Type:    typeInvalidRequest,
			Code:    "charge_already_refunded",
			Message: fmt.Sprintf("Charge %s has already been refunded.", ch.ID),
		})
	}
	if !present {
		amount = remaining
	}
	if amount > remaining {
		return executedError(http.StatusBadRequest, apiError{
			Type:  typeInvalidRequest,
			Code:  "amount_too_large",
			Param: "amount",
			Message: fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)",
				amount, remaining),
		})
	}
	ref := &Refund{
		ID:            l.newIDLocked("re"),
		Charge:        ch.ID,
		Amount:        amount,
		Currency:      ch.Currency,
		Status:        "succeeded",
		Metadata:      metadataParams(c.params),
		Created:       c.s.Now(),
		PaymentIntent: ch.PaymentIntent,
	}
	l.addRefundLocked(ref)
	ch.AmountRefunded += amount
	ch.Refunded = ch.AmountRefunded == ch.Amount
	c.s.emit("refund.created", ref.object())
	c.s.emit("charge.refunded", ch.object())
	return okResponse(ref.object())
}

// refundableIntent answers 400 unless pi succeeded, so that its latest
// charge is captured, and chargeID, when given, is that charge.
func refundableIntent(pi *PaymentIntent, chargeID string) (response, bool) {
	var message string
	switch {
	case pi.Status == PaymentIntentRequiresCapture:
		message = fmt.Sprintf("PaymentIntent %s has not been captured: cancel it to release its funds.", pi.ID)
	case pi.Status != PaymentIntentSucceeded:
		message = fmt.Sprintf("PaymentIntent %s has a status of %s: it has no succeeded charge to refund.", pi.ID, pi.Status)
	case chargeID != "" && chargeID != pi.LatestCharge:
		return executedError(http.StatusBadRequest, apiError{
			Type:    typeInvalidRequest,
			Param:   "charge",
			Message: fmt.Sprintf("Charge %s does not belong to PaymentIntent %s.", chargeID, pi.ID),
		}), false
	default:
		return response{}, true
	}
	return executedError(http.StatusBadRequest, apiError{
		Type:    typeInvalidRequest,
		Code:    codeUnexpectedState,
		Param:   "payment_intent",
		Message: message,
		DocURL:  docURL(codeUnexpectedState),
	}), false
}

// refundRetrieve is GET /v1/refunds/{id}.
func (c *call) refundRetrieve() response {
	if bad, ok := rejectUnknown(c.params, "expand"); ok {
		return bad
	}
	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	ref, ok := l.refundLocked(c.pathID)
	if !ok {
		return noSuchObject(http.StatusNotFound, "refund", "id", c.pathID)
	}
	return okResponse(l.refundObjectLocked(ref, slices.Contains(listParam(c.params, "expand"), "charge")))
}

// listResult is the JSON shape of a Stripe list.
type listResult struct {
	Object  string `json:"object"`
	Data    []any  `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// refundList is GET /v1/refunds: the refunds, newest first, of one charge
// when charge is given, of one PaymentIntent when payment_intent is given,
// within a created range when one is given. Pages follow starting_after,
// as Stripe's lists do; expand[]=data.charge embeds each refund's charge.
func (c *call) refundList() response {
	if bad, ok := rejectUnknown(c.params, "charge", "payment_intent", "created", "limit", "starting_after", "expand"); ok {
		return bad
	}
	created, bad, ok := c.parseCreated()
	if !ok {
		return bad
	}
	chargeID, intentID := c.params.Get("charge"), c.params.Get("payment_intent")

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []*Refund
	for _, r := range l.refunds {
		if (chargeID == "" || r.Charge == chargeID) && (intentID == "" || r.PaymentIntent == intentID) &&
			created.match(r.Created) {
			found = append(found, r)
		}
	}
	expandCharge := slices.Contains(listParam(c.params, "expand"), "data.charge")
	return listPage(c, "/v1/refunds", "refund", found,
		func(r *Refund) string { return r.ID }, func(r *Refund) any { return l.refundObjectLocked(r, expandCharge) })
}

// refundObjectLocked is r's JSON shape, its charge expanded when
// expandCharge. l.mu must be held.
func (l *ledger) refundObjectLocked(r *Refund, expandCharge bool) refundObject {
	o := r.object()
	if ch, ok := l.chargeLocked(r.Charge); ok && expandCharge {
		o.Charge = ch.object()
	}
	return o
}
