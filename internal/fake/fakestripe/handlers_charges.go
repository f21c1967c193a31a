package fakestripe

import (
	"net/http"
)

// chargeCreate is POST /v1/charges. Charges to a customer created with
// tok_chargeCustomerFail are recorded as failed and answered with a 402;
// so are charges to a customer whose card needs authentication, which the
// Charges API cannot ask for (authentication_required).
func (c *call) chargeCreate() response {
	if bad, ok := rejectUnknown(c.params, "amount", "currency", "customer", "description", "metadata", "expand"); ok {
		return bad
	}
	amount, currency, bad, ok := amountParams(c.params)
	if !ok {
		return bad
	}
	customerID := c.params.Get("customer")
	if customerID == "" {
		return missingParam("customer")
	}

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	cust, ok := l.customerLocked(customerID)
	if !ok {
		return noSuchObject(http.StatusBadRequest, "customer", "customer", customerID)
	}
	if cust.Card == "" {
		return executedError(http.StatusBadRequest, apiError{
			Type:    typeInvalidRequest,
			Code:    "missing",
			Param:   "card",
			Message: "Cannot charge a customer that has no active card",
		})
	}
	ch := &Charge{
		ID:          l.newIDLocked("ch"),
		Customer:    cust.ID,
		Amount:      amount,
		Currency:    currency,
		Description: c.params.Get("description"),
		Status:      ChargeSucceeded,
		Paid:        true,
		Metadata:    metadataParams(c.params),
		Created:     c.s.Now(),
	}
	if cust.FailsCharges {
		ch.Status, ch.Paid = ChargeFailed, false
		ch.FailureCode, ch.DeclineCode = "card_declined", "generic_decline"
		l.addChargeLocked(ch)
		c.s.emit("charge.failed", ch.object())
		return cardDeclined(ch.DeclineCode, declineMessage, ch.ID)
	}
	if cust.NeedsAuthentication {
		ch.Status, ch.Paid = ChargeFailed, false
		ch.FailureCode, ch.DeclineCode = codeAuthenticationRequired, codeAuthenticationRequired
		ch.FailureMessage = authenticationRequiredMessage
		l.addChargeLocked(ch)
		c.s.emit("charge.failed", ch.object())
		return executedError(http.StatusPaymentRequired, apiError{
			Type:        typeCard,
			Code:        codeAuthenticationRequired,
			DeclineCode: codeAuthenticationRequired,
			Message:     authenticationRequiredMessage,
			Charge:      ch.ID,
			DocURL:      docURL(codeAuthenticationRequired),
		})
	}
	l.addChargeLocked(ch)
	c.s.emit("charge.succeeded", ch.object())
	return okResponse(ch.object())
}

// chargeRetrieve is GET /v1/charges/{id}.
func (c *call) chargeRetrieve() response {
	if bad, ok := rejectUnknown(c.params, "expand"); ok {
		return bad
	}
	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.chargeLocked(c.pathID)
	if !ok {
		return noSuchObject(http.StatusNotFound, "charge", "id", c.pathID)
	}
	return okResponse(ch.object())
}

// chargeSearch is GET /v1/charges/search; failed charges are found too.
func (c *call) chargeSearch() response {
	return c.search("/v1/charges/search", func(key, value string) []any {
		l := &c.s.ledger
		l.mu.Lock()
		defer l.mu.Unlock()
		var found []any
		for _, ch := range l.charges {
			if v, ok := ch.Metadata[key]; ok && v == value {
				found = append(found, ch.object())
			}
		}
		return found
	})
}
