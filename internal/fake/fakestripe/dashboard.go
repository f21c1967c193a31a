package fakestripe

import (
	"fmt"
	"sync"
)

// What an operator or a bank does at Stripe without the service asking:
// a refund made in the dashboard, a dispute (chargeback) opened by the
// rider's bank and later decided. Each changes the ledger and emits the
// events Stripe emits for it.

// Dispute statuses, as in Stripe's Dispute.status (the ones the fake uses).
const (
	DisputeNeedsResponse = "needs_response"
	DisputeWon           = "won"
	DisputeLost          = "lost"
)

// Dispute is a dispute of a charge as recorded by the server.
type Dispute struct {
	ID       string `json:"id"`
	Charge   string `json:"charge"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
	Created  int64  `json:"created"`
}

type disputeObject struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Amount   int64             `json:"amount"`
	Charge   string            `json:"charge"`
	Created  int64             `json:"created"`
	Currency string            `json:"currency"`
	Livemode bool              `json:"livemode"`
	Metadata map[string]string `json:"metadata"`
	Reason   string            `json:"reason"`
	Status   string            `json:"status"`
}

func (d *Dispute) object() disputeObject {
	return disputeObject{ID: d.ID, Object: "dispute", Amount: d.Amount, Charge: d.Charge, Created: d.Created,
		Currency: d.Currency, Metadata: map[string]string{}, Reason: "fraudulent", Status: d.Status}
}

// disputes holds the disputes by id.
type disputes struct {
	mu   sync.Mutex
	byID map[string]*Dispute
}

// DashboardRefund refunds what is left of the charge as an operator would
// in Stripe's dashboard: no idempotency key, no metadata.
func (s *Server) DashboardRefund(chargeID string) (Refund, error) {
	l := &s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.chargeLocked(chargeID)
	if !ok {
		return Refund{}, fmt.Errorf("no such charge: %s", chargeID)
	}
	if ch.Status != ChargeSucceeded || ch.Uncaptured || ch.AmountRefunded == ch.Amount {
		return Refund{}, fmt.Errorf("charge %s has nothing to refund", chargeID)
	}
	ref := &Refund{
		ID: l.newIDLocked("re"), Charge: ch.ID, Amount: ch.Amount - ch.AmountRefunded, Currency: ch.Currency,
		Status: "succeeded", Metadata: map[string]string{}, Created: s.Now(), PaymentIntent: ch.PaymentIntent,
	}
	l.addRefundLocked(ref)
	ch.AmountRefunded, ch.Refunded = ch.Amount, true
	s.emit("refund.created", ref.object())
	s.emit("charge.refunded", ch.object())
	return ref.clone(), nil
}

// DisputeOpen opens a dispute of the whole charge, as the rider's bank
// would.
func (s *Server) DisputeOpen(chargeID string) (Dispute, error) {
	l := &s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.chargeLocked(chargeID)
	if !ok || ch.Status != ChargeSucceeded || ch.Uncaptured {
		return Dispute{}, fmt.Errorf("no succeeded charge %s", chargeID)
	}
	d := &Dispute{ID: l.newIDLocked("dp"), Charge: ch.ID, Amount: ch.Amount, Currency: ch.Currency,
		Status: DisputeNeedsResponse, Created: unix(s.Now())}
	s.disputes.mu.Lock()
	if s.disputes.byID == nil {
		s.disputes.byID = map[string]*Dispute{}
	}
	s.disputes.byID[d.ID] = d
	s.disputes.mu.Unlock()
	s.emit("charge.dispute.created", d.object())
	return *d, nil
}

// DisputeClose decides the dispute: status is DisputeWon or DisputeLost.
func (s *Server) DisputeClose(disputeID, status string) (Dispute, error) {
	if status != DisputeWon && status != DisputeLost {
		return Dispute{}, fmt.Errorf("a dispute closes as %q or %q, not %q", DisputeWon, DisputeLost, status)
	}
	s.disputes.mu.Lock()
	defer s.disputes.mu.Unlock()
	d, ok := s.disputes.byID[disputeID]
	if !ok {
		return Dispute{}, fmt.Errorf("no such dispute: %s", disputeID)
	}
	if d.Status == DisputeWon || d.Status == DisputeLost {
		return Dispute{}, fmt.Errorf("dispute %s is closed already", disputeID)
	}
	d.Status = status
	s.emit("charge.dispute.closed", d.object())
	return *d, nil
}
