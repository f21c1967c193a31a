package receipts

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service"
	"github.com/atomicrides/atomicrides/service/idem"
)

// Kind names what a receipt is for.
type Kind string

const (
	// KindRide is the receipt of a charged ride.
	KindRide Kind = "ride"
	// KindRefund is the receipt of a refunded ride.
	KindRefund Kind = "refund"
)

// MessageID is the Message-ID of a ride's receipt of the given kind:
// the same on every send, so that a resend is recognisable downstream.
func MessageID(kind Kind, rideID int64, from string) string {
	return fmt.Sprintf("receipt.%s-%d@%s", kind, rideID, mailDomain(from))
}

// RecordedFunc runs in the transaction that records a sent receipt,
// so that what it writes commits with the record, or not at all: the receipt
// job's completion (river.JobCompleteTx), say. It must not call anything on
// the network.
type RecordedFunc func(ctx context.Context, tx pgx.Tx) error

// RideSend emails the receipt of a charged ride, once: it returns
// false when the receipt was already sent. The message goes out with no
// transaction open and is recorded after the mail server accepted it, in one
// transaction with what recorded (may be nil) writes; a failure in between
// resends it under the same Message-ID.
func (s *Service) RideSend(ctx context.Context, rideID int64, recorded RecordedFunc) (bool, error) {
	return s.send(ctx, KindRide, rideID, recorded, func(ride *dbgen.Ride) (string, string, error) {
		status := service.RideChargeStatus(ride.ChargeStatus)
		if (status != service.RideChargeCharged && status != service.RideChargeCompleted) || ride.StripeChargeID == nil {
			return "", "", &service.Error{Code: service.CodeInvalid, Message: fmt.Sprintf("ride %d is not charged", ride.ID)}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Thank you for riding with Atomic Rides.\n\n")
		fmt.Fprintf(&b, "Ride:    %d\n", ride.ID)
		fmt.Fprintf(&b, "Booked:  %s\n", ride.CreatedAt.UTC().Format("2006-01-02 15:04 MST"))
		fmt.Fprintf(&b, "From:    %.6f, %.6f\n", ride.OriginLat, ride.OriginLon)
		fmt.Fprintf(&b, "To:      %.6f, %.6f\n", ride.TargetLat, ride.TargetLon)
		if status == service.RideChargeCompleted && ride.FareCents != nil {
			writeTripReceipt(&b, ride)
		} else {
			fmt.Fprintf(&b, "Charged: %s\n", service.FormatAmount(ride.AmountCents, ride.Currency))
			fmt.Fprintf(&b, "Charge:  %s\n", *ride.StripeChargeID)
		}
		return fmt.Sprintf("Your receipt for ride %d", ride.ID), b.String(), nil
	})
}

// RefundSend emails the receipt of a refunded ride, once, like
// RideSend.
func (s *Service) RefundSend(ctx context.Context, rideID int64, recorded RecordedFunc) (bool, error) {
	return s.send(ctx, KindRefund, rideID, recorded, func(ride *dbgen.Ride) (string, string, error) {
		refund, err := s.queries.RefundGetByRide(ctx, s.pool, rideID)
		if service.IsNoRows(err) || (err == nil && (service.RideRefundStatus(refund.Status) != service.RideRefundRefunded || refund.StripeRefundID == nil)) {
			return "", "", &service.Error{Code: service.CodeInvalid, Message: fmt.Sprintf("ride %d is not refunded", ride.ID)}
		} else if err != nil {
			return "", "", service.Internal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Your ride has been refunded.\n\n")
		fmt.Fprintf(&b, "Ride:     %d\n", ride.ID)
		fmt.Fprintf(&b, "Refunded: %s\n", service.FormatAmount(refund.AmountCents, refund.Currency))
		fmt.Fprintf(&b, "Refund:   %s\n", *refund.StripeRefundID)
		fmt.Fprintf(&b, "It reaches your card within 5 to 10 business days.\n")
		return fmt.Sprintf("Your refund for ride %d", ride.ID), b.String(), nil
	})
}

// receiptBody builds the subject and text of a receipt, or refuses to.
type receiptBody func(ride *dbgen.Ride) (subject, text string, err error)

func (s *Service) send(ctx context.Context, kind Kind, rideID int64, recorded RecordedFunc, body receiptBody) (sent bool, err error) {
	defer func() { s.counted(kind, sent, err) }()
	if s.mailer == nil {
		return false, service.Internal(errNoMailer)
	}
	subj, err := s.queries.ReceiptSubject(ctx, s.pool, string(kind), rideID)
	if service.IsNoRows(err) {
		return false, &service.Error{Code: service.CodeNotFound, Message: fmt.Sprintf("no ride %d", rideID)}
	} else if err != nil {
		return false, service.Internal(err)
	}
	if subj.Sent {
		return false, nil
	}
	subject, text, err := body(&subj.Ride)
	if err != nil {
		return false, err
	}
	msg := service.Message{
		MessageID: MessageID(kind, rideID, s.from),
		From:      s.from,
		To:        subj.Email,
		Subject:   subject,
		Date:      s.now(),
		Text:      text,
	}
	if err := s.mailer.Send(ctx, msg); err != nil {
		return false, fmt.Errorf("send %s receipt of ride %d: %w", kind, rideID, err)
	}
	// What recorded writes goes first, with the BEGIN; the record goes last,
	// with the COMMIT (commitWith): two round trips.
	err = s.record(ctx, recorded, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.queries.ReceiptRecord(ctx, idem.CommitWith(tx), dbgen.ReceiptRecordParams{
			Kind: string(kind), RideID: rideID, MessageID: msg.MessageID, Recipient: msg.To, SentAt: msg.Date,
		})
		return err
	})
	if err != nil {
		return true, service.Internal(err)
	}
	return true, nil
}

// writeTripReceipt writes a completed trip's money: its fare, what was held
// and captured, and the fare above the hold.
func writeTripReceipt(b *strings.Builder, ride *dbgen.Ride) {
	fmt.Fprintf(b, "Fare:    %s\n", service.FormatAmount(*ride.FareCents, ride.Currency))
	fmt.Fprintf(b, "Held:    %s (the rest released)\n", service.FormatAmount(ride.AmountCents, ride.Currency))
	if ride.CapturedCents != nil {
		fmt.Fprintf(b, "Charged: %s\n", service.FormatAmount(*ride.CapturedCents, ride.Currency))
	}
	fmt.Fprintf(b, "Charge:  %s\n", *ride.StripeChargeID)
	if ride.ExtraCents != nil && ride.ExtraStatus != nil {
		switch *ride.ExtraStatus {
		case service.ExtraCharged:
			var charge string
			if ride.ExtraChargeID != nil {
				charge = *ride.ExtraChargeID
			}
			fmt.Fprintf(b, "Extra:   %s, charged (%s)\n", service.FormatAmount(*ride.ExtraCents, ride.Currency), charge)
		case service.ExtraDue:
			fmt.Fprintf(b, "Extra:   %s, due: your card declined it; pay it in the app before your next ride\n", service.FormatAmount(*ride.ExtraCents, ride.Currency))
		}
	}
}
