package fakestripe

import (
	"maps"
	"sync"
	"time"
)

// Charge statuses, as in Stripe's Charge.status.
const (
	ChargeSucceeded = "succeeded"
	ChargeFailed    = "failed"
)

// Customer is a customer as recorded by the server.
type Customer struct {
	ID    string `json:"id"`
	Email string `json:"email,omitempty"`
	// Source is the token the customer was created with.
	Source string `json:"source,omitempty"`
	// Card is the id of the card attached from Source; empty without one.
	Card string `json:"card,omitempty"`
	// FailsCharges is set for customers created with
	// tok_chargeCustomerFail: every charge to them is declined.
	FailsCharges bool `json:"fails_charges"`
	// NeedsAuthentication is set for customers whose card's bank asks for
	// authentication (3-D Secure) on every payment: a PaymentIntent
	// confirmed on-session waits for it (requires_action), one confirmed
	// off-session fails with authentication_required, and so does a
	// charge of the Charges API, which cannot authenticate.
	NeedsAuthentication bool `json:"needs_authentication,omitempty"`
	// DeclineAfterAuthentication, when set, is the decline code of every
	// payment the rider authenticated (insufficient_funds for
	// tok_authenticationRequiredChargeDeclinedInsufficientFunds).
	DeclineAfterAuthentication string            `json:"decline_after_authentication,omitempty"`
	Metadata                   map[string]string `json:"metadata"`
	Created                    time.Time         `json:"created"`
}

// Charge is a charge attempt as recorded by the server, declined ones
// included, as Stripe records them.
type Charge struct {
	ID          string `json:"id"`
	Customer    string `json:"customer"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description,omitempty"`
	// Status is ChargeSucceeded or ChargeFailed; Paid is true exactly when
	// the charge succeeded.
	Status         string `json:"status"`
	Paid           bool   `json:"paid"`
	AmountRefunded int64  `json:"amount_refunded"`
	Refunded       bool   `json:"refunded"`
	FailureCode    string `json:"failure_code,omitempty"`
	DeclineCode    string `json:"decline_code,omitempty"`
	// FailureMessage is the failure's message; empty means Stripe's
	// generic "Your card was declined."
	FailureMessage string            `json:"failure_message,omitempty"`
	Metadata       map[string]string `json:"metadata"`
	Created        time.Time         `json:"created"`
	// PaymentIntent is the id of the PaymentIntent that made the charge;
	// empty for a charge of the Charges API.
	PaymentIntent string `json:"payment_intent,omitempty"`
	// Uncaptured is set on the succeeded charge of a PaymentIntent with
	// capture_method manual until it is captured; it stays set when the
	// PaymentIntent is cancelled instead (the hold released).
	Uncaptured bool `json:"uncaptured,omitempty"`
	// AmountReleased is the part of the authorized amount that was never
	// captured (a partial capture's rest, or all of a cancelled hold). It
	// is counted in AmountRefunded, as Stripe counts it.
	AmountReleased int64 `json:"amount_released,omitempty"`
}

// Refund is a refund as recorded by the server.
type Refund struct {
	ID       string            `json:"id"`
	Charge   string            `json:"charge"`
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Status   string            `json:"status"`
	Metadata map[string]string `json:"metadata"`
	Created  time.Time         `json:"created"`
	// PaymentIntent is the PaymentIntent of the refunded charge, if any.
	PaymentIntent string `json:"payment_intent,omitempty"`
	// Reason is the refund's reason, as Stripe names it; Stripe sets
	// RefundReasonExpired itself on the release of a lapsed hold.
	Reason string `json:"reason,omitempty"`
	// Release is set on the refund by which Stripe shows an uncaptured
	// hold released (its PaymentIntent cancelled, or the hold lapsed): no
	// money was taken, so none is returned, and no balance transaction
	// (nothing to settle) comes with it.
	Release bool `json:"release,omitempty"`
}

// RefundReasonExpired is the reason of the refund that releases a hold
// that lapsed uncaptured.
const RefundReasonExpired = "expired_uncaptured_charge"

// Snapshot is a consistent copy of everything the server recorded.
type Snapshot struct {
	Customers []Customer `json:"customers"`
	Charges   []Charge   `json:"charges"`
	Refunds   []Refund   `json:"refunds"`
	// PaymentIntents are the PaymentIntents, in creation order.
	PaymentIntents []PaymentIntent `json:"payment_intents"`
	// Disputes are the disputes opened (DisputeOpen), in no order.
	Disputes []Dispute `json:"disputes"`
	Requests []Request `json:"requests"`
}

// ledger holds the objects in creation order, indexed by id. Handlers
// mutate it under mu; accessors return deep copies.
type ledger struct {
	mu             sync.Mutex
	customers      []*Customer
	charges        []*Charge
	refunds        []*Refund
	paymentIntents []*PaymentIntent
	byID           map[string]any
}

func (l *ledger) init() {
	l.customers, l.charges, l.refunds, l.paymentIntents = nil, nil, nil, nil
	l.byID = make(map[string]any)
}

func (l *ledger) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
}

// newIDLocked returns an unused id with prefix. l.mu must be held.
func (l *ledger) newIDLocked(prefix string) string {
	for {
		id := newID(prefix)
		if _, taken := l.byID[id]; !taken {
			return id
		}
	}
}

func (l *ledger) customerLocked(id string) (*Customer, bool) {
	c, ok := l.byID[id].(*Customer)
	return c, ok
}

func (l *ledger) chargeLocked(id string) (*Charge, bool) {
	c, ok := l.byID[id].(*Charge)
	return c, ok
}

func (l *ledger) refundLocked(id string) (*Refund, bool) {
	r, ok := l.byID[id].(*Refund)
	return r, ok
}

func (l *ledger) addCustomerLocked(c *Customer) {
	l.customers = append(l.customers, c)
	l.byID[c.ID] = c
}

func (l *ledger) addChargeLocked(c *Charge) {
	l.charges = append(l.charges, c)
	l.byID[c.ID] = c
}

func (l *ledger) addRefundLocked(r *Refund) {
	l.refunds = append(l.refunds, r)
	l.byID[r.ID] = r
}

func (c *Customer) clone() Customer {
	out := *c
	out.Metadata = maps.Clone(c.Metadata)
	return out
}

func (c *Charge) clone() Charge {
	out := *c
	out.Metadata = maps.Clone(c.Metadata)
	return out
}

func (r *Refund) clone() Refund {
	out := *r
	out.Metadata = maps.Clone(r.Metadata)
	return out
}

func filterClone[T any, C any](items []*T, keep func(*T) bool, clone func(*T) C) []C {
	out := []C{}
	for _, it := range items {
		if keep(it) {
			out = append(out, clone(it))
		}
	}
	return out
}

func all[T any](*T) bool { return true }

// Customers returns every customer, in creation order.
func (s *Server) Customers() []Customer {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return filterClone(s.ledger.customers, all, (*Customer).clone)
}

// CustomersWithMetadata returns the customers whose metadata key is value.
func (s *Server) CustomersWithMetadata(key, value string) []Customer {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return filterClone(s.ledger.customers, func(c *Customer) bool { return c.Metadata[key] == value }, (*Customer).clone)
}

// Charges returns every charge attempt, declined ones included, in creation
// order.
func (s *Server) Charges() []Charge {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return filterClone(s.ledger.charges, all, (*Charge).clone)
}

// SucceededCharges returns the charges that succeeded (refunded or not).
func (s *Server) SucceededCharges() []Charge {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return filterClone(s.ledger.charges, func(c *Charge) bool { return c.Status == ChargeSucceeded }, (*Charge).clone)
}

// ChargesWithMetadata returns the charge attempts whose metadata key is
// value, declined ones included.
func (s *Server) ChargesWithMetadata(key, value string) []Charge {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return filterClone(s.ledger.charges, func(c *Charge) bool { return c.Metadata[key] == value }, (*Charge).clone)
}

// Refunds returns every refund, in creation order.
func (s *Server) Refunds() []Refund {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return filterClone(s.ledger.refunds, all, (*Refund).clone)
}

// RefundsForCharge returns the refunds of the charge chargeID.
func (s *Server) RefundsForCharge(chargeID string) []Refund {
	s.ledger.mu.Lock()
	defer s.ledger.mu.Unlock()
	return filterClone(s.ledger.refunds, func(r *Refund) bool { return r.Charge == chargeID }, (*Refund).clone)
}

// Snapshot returns a copy of the whole ledger and request journal. The
// objects are consistent with each other; requests are taken right after.
func (s *Server) Snapshot() Snapshot {
	s.ledger.mu.Lock()
	snap := Snapshot{
		Customers:      filterClone(s.ledger.customers, all, (*Customer).clone),
		Charges:        filterClone(s.ledger.charges, all, (*Charge).clone),
		Refunds:        filterClone(s.ledger.refunds, all, (*Refund).clone),
		PaymentIntents: filterClone(s.ledger.paymentIntents, all, (*PaymentIntent).clone),
	}
	s.ledger.mu.Unlock()
	s.disputes.mu.Lock()
	snap.Disputes = make([]Dispute, 0, len(s.disputes.byID))
	for _, d := range s.disputes.byID {
		snap.Disputes = append(snap.Disputes, *d)
	}
	s.disputes.mu.Unlock()
	snap.Requests = s.Requests()
	return snap
}
