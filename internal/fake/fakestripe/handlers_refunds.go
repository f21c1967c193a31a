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
	c.s.emit("refund.created", ref.object())
	c.s.emit("charge.refunded", ch.object())
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

// listResult is the JSON shape of a Stripe list.
type listResult struct {
	Object  string `json:"object"`
	Data    []any  `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// refundList is GET /v1/refunds: the refunds, newest first, of one charge
// when charge is given, within a created range when one is given. Pages
// follow starting_after, as Stripe's lists do.
func (c *call) refundList() response {
	if bad, ok := rejectUnknown(c.params, "charge", "created", "limit", "starting_after", "expand"); ok {
		return bad
	}
	created, bad, ok := c.parseCreated()
	if !ok {
		return bad
	}
	chargeID := c.params.Get("charge")

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []*Refund
	for _, r := range l.refunds {
		if (chargeID == "" || r.Charge == chargeID) && created.match(r.Created) {
			found = append(found, r)
		}
	}
	return listPage(c, "/v1/refunds", "refund", found,
		func(r *Refund) string { return r.ID }, func(r *Refund) any { return r.object() })
}
