package service

import (
	"context"
	"encoding/json"
)

// KeyAttempt is one processor a request was routed to: the first choice,
// committed before the first call, and each later move after a definitive
// "not charged".
type KeyAttempt struct {
	Attempt   int    `json:"attempt"`
	Processor string `json:"processor"`
	// Reason is why the request moved on from this processor, if it did.
	Reason string `json:"reason,omitempty"`
}

// keyAttempts returns the processor attempts of the request of key: for a
// booking, its ride's routing and reroutes (from the audit log); for a
// refund, the processor of the refunded ride. A request that has not
// reached a processor has none.
func (s *Service) keyAttempts(ctx context.Context, k *KeyInfo) ([]KeyAttempt, error) {
	switch k.Flow {
	case s.rides.Name:
		ride, err := s.queries.RideGetByIdempotencyKey(ctx, s.pool, &k.ID)
		if IsNoRows(err) {
			return nil, nil
		} else if err != nil {
			return nil, Internal(err)
		}
		audits, err := s.queries.AuditRecordListByResource(ctx, s.pool, "ride", ride.ID)
		if err != nil {
			return nil, Internal(err)
		}
		var out []KeyAttempt
		for _, a := range audits {
			if a.Action != "ride.charge_rerouted" {
				continue
			}
			var moved struct {
				From   string `json:"from"`
				Reason string `json:"reason"`
			}
			if err := json.Unmarshal(a.Data, &moved); err != nil {
				return nil, Internal(err)
			}
			out = append(out, KeyAttempt{Attempt: len(out) + 1, Processor: moved.From, Reason: moved.Reason})
		}
		return append(out, KeyAttempt{Attempt: len(out) + 1, Processor: ride.Processor}), nil
	case s.refunds.Name:
		ref, err := s.queries.RefundGetByIdempotencyKey(ctx, s.pool, &k.ID)
		if IsNoRows(err) {
			return nil, nil
		} else if err != nil {
			return nil, Internal(err)
		}
		return []KeyAttempt{{Attempt: 1, Processor: ref.Processor}}, nil
	}
	return nil, nil
}
