package fakestripe

import (
	"fmt"
	"net/http"
)

// refundCreate is POST /v1/refunds: refunds the rest of the charge, or
// amount of it.
func (c *call) refundCreate() response {
	if bad, ok := rejectUnknown(c.params, "charge", "amount", "reason", "metadata", "expand"); ok {
		return bad
	}
	chargeID := c.params.Get("charge")
	if chargeID == "" {
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
	ch, ok := l.chargeLocked(chargeID)
	if !ok {
		return noSuchObject(http.StatusBadRequest, "charge", "charge", chargeID)
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
		ID:       l.newIDLocked("re"),
		Charge:   ch.ID,
		Amount:   amount,
		Currency: ch.Currency,
		Status:   "succeeded",
		Metadata: metadataParams(c.params),
		Created:  c.s.Now(),
	}
	l.addRefundLocked(ref)
	ch.AmountRefunded += amount
	ch.Refunded = ch.AmountRefunded == ch.Amount
	return okResponse(ref.object())
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
	return okResponse(ref.object())
}
