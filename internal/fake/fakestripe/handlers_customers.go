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

	// Cards whose bank asks for authentication (3-D Secure): on-session
	// payments wait for the rider (requires_action), off-session ones
	// fail with authentication_required. No card is ever set up here, so
	// the OnSetup cards behave like the others.
	TokenAuthenticationRequired                = "tok_authenticationRequired"
	PaymentMethodAuthenticationRequired        = "pm_card_authenticationRequired"
	TokenAuthenticationRequiredOnSetup         = "tok_authenticationRequiredOnSetup"
	PaymentMethodAuthenticationRequiredOnSetup = "pm_card_authenticationRequiredOnSetup"
	TokenThreeDSecure2Required                 = "tok_threeDSecure2Required"
	PaymentMethodThreeDSecure2Required         = "pm_card_threeDSecure2Required"
	// Cards whose bank asks for authentication and, once the rider
	// authenticated, declines the payment for insufficient funds.
	TokenAuthenticationRequiredChargeDeclinedInsufficientFunds         = "tok_authenticationRequiredChargeDeclinedInsufficientFunds"
	PaymentMethodAuthenticationRequiredChargeDeclinedInsufficientFunds = "pm_card_authenticationRequiredChargeDeclinedInsufficientFunds"
)

// cardBehaviour is how a card answers payments, decided by the test token
// or payment method it was made from.
type cardBehaviour struct {
	// fails: every payment is declined (generic_decline).
	fails bool
	// authenticate: the bank asks for authentication.
	authenticate bool
	// declineAfterAuthentication: the decline code of a payment the rider
	// authenticated, if it is declined.
	declineAfterAuthentication string
}

// behaviourOf is the behaviour of a card made from source.
func behaviourOf(source string) cardBehaviour {
	switch source {
	case TokenChargeCustomerFail:
		return cardBehaviour{fails: true}
	case TokenAuthenticationRequired, PaymentMethodAuthenticationRequired,
		TokenAuthenticationRequiredOnSetup, PaymentMethodAuthenticationRequiredOnSetup,
		TokenThreeDSecure2Required, PaymentMethodThreeDSecure2Required:
		return cardBehaviour{authenticate: true}
	case TokenAuthenticationRequiredChargeDeclinedInsufficientFunds,
		PaymentMethodAuthenticationRequiredChargeDeclinedInsufficientFunds:
		return cardBehaviour{authenticate: true, declineAfterAuthentication: "insufficient_funds"}
	}
	return cardBehaviour{}
}

// cardBehaviour is the behaviour of the customer's card.
func (c *Customer) cardBehaviour() cardBehaviour {
	return cardBehaviour{
		fails:                      c.FailsCharges,
		authenticate:               c.NeedsAuthentication,
		declineAfterAuthentication: c.DeclineAfterAuthentication,
	}
}

// sourcePrefixes are the id prefixes accepted as a working payment source.
var sourcePrefixes = []string{"tok_", "src_", "card_", "pm_"}

// customerCreate is POST /v1/customers.
func (c *call) customerCreate() response {
	if bad, ok := rejectUnknown(c.params, "email", "source", "description", "name", "metadata", "expand"); ok {
		return bad
	}
	source := c.params.Get("source")
	switch source {
	case "":
	case TokenChargeDeclined:
		return cardDeclined("generic_decline", declineMessage, "")
	case TokenChargeDeclinedInsufficientFunds:
		return cardDeclined("insufficient_funds", insufficientFundsMessage, "")
	default:
		if !hasAnyPrefix(source, sourcePrefixes) {
			return noSuchObject(http.StatusBadRequest, "token", "source", source)
		}
	}

	l := &c.s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	card := behaviourOf(source)
	cust := &Customer{
		ID:                         l.newIDLocked("cus"),
		Email:                      c.params.Get("email"),
		Source:                     source,
		FailsCharges:               card.fails,
		NeedsAuthentication:        card.authenticate,
		DeclineAfterAuthentication: card.declineAfterAuthentication,
		Metadata:                   metadataParams(c.params),
		Created:                    c.s.Now(),
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
