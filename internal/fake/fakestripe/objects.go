package fakestripe

import (
	"cmp"
	"time"
)

// The types in this file are the JSON shapes of Stripe API objects as the
// server sends them, with the fields stripe-go decodes. Nullable fields are
// pointers so that they encode as null, as Stripe's do.

type customerObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Balance          int64             `json:"balance"`
	Created          int64             `json:"created"`
	Currency         *string           `json:"currency"`
	DefaultSource    *string           `json:"default_source"`
	Delinquent       bool              `json:"delinquent"`
	Description      *string           `json:"description"`
	Email            *string           `json:"email"`
	Livemode         bool              `json:"livemode"`
	Metadata         map[string]string `json:"metadata"`
	Name             *string           `json:"name"`
	Phone            *string           `json:"phone"`
	PreferredLocales []string          `json:"preferred_locales"`
	TaxExempt        string            `json:"tax_exempt"`
}

type chargeOutcome struct {
	NetworkStatus string  `json:"network_status"`
	Reason        *string `json:"reason"`
	RiskLevel     string  `json:"risk_level"`
	SellerMessage string  `json:"seller_message"`
	Type          string  `json:"type"`
}

type chargeObject struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCaptured     int64             `json:"amount_captured"`
	AmountRefunded     int64             `json:"amount_refunded"`
	BalanceTransaction *string           `json:"balance_transaction"`
	Captured           bool              `json:"captured"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	Disputed           bool              `json:"disputed"`
	FailureCode        *string           `json:"failure_code"`
	FailureMessage     *string           `json:"failure_message"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	Outcome            chargeOutcome     `json:"outcome"`
	Paid               bool              `json:"paid"`
	PaymentIntent      *string           `json:"payment_intent"`
	Refunded           bool              `json:"refunded"`
	Status             string            `json:"status"`
}

type refundObject struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Amount             int64   `json:"amount"`
	BalanceTransaction *string `json:"balance_transaction"`
	// Charge is the charge's id, or the charge itself when expanded
	// (expand[]=charge, expand[]=data.charge in a list).
	Charge        any               `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent *string           `json:"payment_intent"`
	Reason        *string           `json:"reason"`
	Status        string            `json:"status"`
}

type searchResult struct {
	Object   string  `json:"object"`
	Data     []any   `json:"data"`
	HasMore  bool    `json:"has_more"`
	NextPage *string `json:"next_page"`
	URL      string  `json:"url"`
}

// Messages of card errors.
const (
	declineMessage                = "Your card was declined."
	insufficientFundsMessage      = "Your card has insufficient funds."
	authenticationRequiredMessage = "Your card was declined. This transaction requires authentication."
	authenticationFailedMessage   = "The provided PaymentMethod has failed authentication. Confirm the PaymentIntent " +
		"again with another payment method, or with the same one to authenticate again."
)

// declineMessageOf is the message of a decline with declineCode.
func declineMessageOf(declineCode string) string {
	if declineCode == "insufficient_funds" {
		return insufficientFundsMessage
	}
	return declineMessage
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func metadataOrEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func unix(t time.Time) int64 { return t.Unix() }

func (c *Customer) object() customerObject {
	return customerObject{
		ID:               c.ID,
		Object:           "customer",
		Created:          unix(c.Created),
		DefaultSource:    nullable(c.Card),
		Email:            nullable(c.Email),
		Metadata:         metadataOrEmpty(c.Metadata),
		PreferredLocales: []string{},
		TaxExempt:        "none",
	}
}

func (c *Charge) object() chargeObject {
	o := chargeObject{
		ID:             c.ID,
		Object:         "charge",
		Amount:         c.Amount,
		AmountRefunded: c.AmountRefunded,
		Created:        unix(c.Created),
		Currency:       c.Currency,
		Customer:       nullable(c.Customer),
		Description:    nullable(c.Description),
		Metadata:       metadataOrEmpty(c.Metadata),
		Paid:           c.Paid,
		PaymentIntent:  nullable(c.PaymentIntent),
		Refunded:       c.Refunded,
		Status:         c.Status,
	}
	if c.Status == ChargeSucceeded {
		if !c.Uncaptured {
			o.AmountCaptured = c.Amount - c.AmountReleased
			o.Captured = true
			o.BalanceTransaction = nullable("txn_" + c.ID[len("ch_"):])
		}
		o.Outcome = chargeOutcome{
			NetworkStatus: "approved_by_network",
			RiskLevel:     "normal",
			SellerMessage: "Payment complete.",
			Type:          "authorized",
		}
	} else {
		o.FailureCode = nullable(c.FailureCode)
		o.FailureMessage = nullable(cmp.Or(c.FailureMessage, declineMessage))
		o.Outcome = chargeOutcome{
			NetworkStatus: "declined_by_network",
			Reason:        nullable(c.DeclineCode),
			RiskLevel:     "normal",
			SellerMessage: "The bank did not return any further details with this decline.",
			Type:          "issuer_declined",
		}
	}
	return o
}

func (r *Refund) object() refundObject {
	o := refundObject{
		ID:            r.ID,
		Object:        "refund",
		Amount:        r.Amount,
		Charge:        r.Charge,
		Created:       unix(r.Created),
		Currency:      r.Currency,
		Metadata:      metadataOrEmpty(r.Metadata),
		PaymentIntent: nullable(r.PaymentIntent),
		Reason:        nullable(r.Reason),
		Status:        r.Status,
	}
	if !r.Release {
		o.BalanceTransaction = nullable("txn_" + r.ID[len("re_"):])
	}
	return o
}
