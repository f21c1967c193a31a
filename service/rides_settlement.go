package service

import (
	"context"
	"time"
)

// RideDetail is a ride as GET /rides/{id} shows it: the ride, and what the
// bank settled of it.
type RideDetail struct {
	Ride
	// Settlement is nil until a settlement file of the bank's settles the
	// ride's charge.
	Settlement *RideSettlement `json:"settlement"`
}

// RideSettlement is what a rider may know of the bank's settlement of the
// ride's charge and refund: that each settled, when, and in which payout.
// Gross, fee and net amounts are the merchant's business with its acquirer
// and are deliberately left out.
type RideSettlement struct {
	SettledAt       time.Time  `json:"settled_at" doc:"When the payout that settles the ride's charge takes effect at the bank (the settlement file's automatic_payout_effective_at), UTC."`
	PayoutID        string     `json:"payout_id" example:"po_1QAbCdEfGhIjKlMn" doc:"The acquirer's payout that settles the charge."`
	RefundSettledAt *time.Time `json:"refund_settled_at" doc:"When the payout that settles the ride's refund takes effect, UTC; null until the bank settled a refund of the ride."`
	RefundPayoutID  *string    `json:"refund_payout_id" doc:"The acquirer's payout that settles the refund; null until the bank settled a refund of the ride."`
}

// RideDetailGet is RideGet with the ride's settlement: one more read, made
// only once the ride is known to be the user's.
func (s *Service) RideDetailGet(ctx context.Context, userID, rideID int64) (*RideDetail, error) {
	ride, err := s.RideGet(ctx, userID, rideID)
	if err != nil {
		return nil, err
	}
	lines, err := s.queries.SettlementListByRide(ctx, s.pool, &ride.ID)
	if err != nil {
		return nil, Internal(err)
	}
	d := &RideDetail{Ride: *ride}
	var refundAt *time.Time
	var refundPayout *string
	for _, l := range lines {
		switch l.Type {
		case "charge":
			if d.Settlement == nil {
				d.Settlement = &RideSettlement{SettledAt: l.PayoutEffectiveAt.UTC(), PayoutID: l.PayoutID}
			}
		case "refund":
			if refundAt == nil {
				at, payout := l.PayoutEffectiveAt.UTC(), l.PayoutID
				refundAt, refundPayout = &at, &payout
			}
		}
	}
	if d.Settlement != nil {
		d.Settlement.RefundSettledAt, d.Settlement.RefundPayoutID = refundAt, refundPayout
	}
	return d, nil
}
