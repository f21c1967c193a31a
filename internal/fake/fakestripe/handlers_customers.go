package fakestripe

import (
	"net/http"
	"strings"
)

// Test tokens with special behaviour; see the package documentation.
const (
	TokenChargeDeclined                  = "tok_chargeDeclined"
	TokenChargeDeclinedInsufficientFunds = "tok_chargeDeclinedInsufficientFunds"
	TokenChargeCustomerFail              = "tok_chargeCustomerFail"
)

// sourcePrefixes are the id prefixes accepted as a working payment source.
var sourcePrefixes = []string{"tok_", "src_", "card_", "pm_"}

// customerCreate is POST /v1/customers.
func (c *call) customerCreate() response {
	if bad, ok := rejectUnknown(c.params, "email", "source", "description", "name", "metadata", "expand"); ok {
		return bad
	}
	source := c.params.Get("source")
	failsCharges := false
	switch source {
	case "":
	case TokenChargeDeclined:
		return cardDeclined("generic_decline", declineMessage, "")
	case TokenChargeDeclinedInsufficientFunds:
		return cardDeclined("insufficient_funds", "Your card has insufficient funds.", "")
	case TokenChargeCustomerFail:
		failsCharges = true
	default:
		if !hasAnyPrefix(source, sourcePrefixes) {
			return noSuchObject(http.StatusBadRequest, "token", "source", source)
		}
	}

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	cust := &Customer{
		ID:           l.newIDLocked("cus"),
		Email:        c.params.Get("email"),
		Source:       source,
		FailsCharges: failsCharges,
		Metadata:     metadataParams(c.params),
		Created:      c.s.Now(),
	}
	if source != "" {
		cust.Card = l.newIDLocked("card")
	}
	l.addCustomerLocked(cust)
	return okResponse(cust.object())
}

// customerRetrieve is GET /v1/customers/{id}.
func (c *call) customerRetrieve() response {
	if bad, ok := rejectUnknown(c.params, "expand"); ok {
		return bad
	}
	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	cust, ok := l.customerLocked(c.pathID)
	if !ok {
		return noSuchObject(http.StatusNotFound, "customer", "id", c.pathID)
	}
	return okResponse(cust.object())
}

// customerSearch is GET /v1/customers/search.
func (c *call) customerSearch() response {
	return c.search("/v1/customers/search", func(key, value string) []any {
		l := &c.s.ledger
		l.mu.Lock()
		defer l.mu.Unlock()
		var found []any
		for _, cust := range l.customers {
			if v, ok := cust.Metadata[key]; ok && v == value {
				found = append(found, cust.object())
			}
		}
		return found
	})
}

// cardDeclined is the 402 for a declined card; chargeID names the failed
// charge when there is one.
func cardDeclined(declineCode, message, chargeID string) response {
	return executedError(http.StatusPaymentRequired, apiError{
		Type:        typeCard,
		Code:        "card_declined",
		DeclineCode: declineCode,
		Message:     message,
		Charge:      chargeID,
		DocURL:      "https://stripe.com/docs/error-codes/card-declined",
	})
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) && len(s) > len(p) {
			return true
		}
	}
	return false
}
