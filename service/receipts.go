package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/atomicrides/atomicrides/dbgen"
	"github.com/atomicrides/atomicrides/service/idem"
)

// ReceiptKind names what a receipt is for.
type ReceiptKind string

const (
	// ReceiptRide is the receipt of a charged ride.
	ReceiptRide ReceiptKind = "ride"
	// ReceiptRefund is the receipt of a refunded ride.
	ReceiptRefund ReceiptKind = "refund"
)

// ReceiptMessageID is the Message-ID of a ride's receipt of the given kind:
// the same on every send, so that a resend is recognisable downstream.
func ReceiptMessageID(kind ReceiptKind, rideID int64, from string) string {
	return fmt.Sprintf("receipt.%s-%d@%s", kind, rideID, mailDomain(from))
}

// ReceiptRecordedFunc runs in the transaction that records a sent receipt,
// so that what it writes commits with the record, or not at all: the receipt
// job's completion (river.JobCompleteTx), say. It must not call anything on
// the network.
type ReceiptRecordedFunc func(ctx context.Context, tx pgx.Tx) error

// RideReceiptSend emails the receipt of a charged ride, once: it returns
// false when the receipt was already sent. The message goes out with no
// transaction open and is recorded after the mail server accepted it, in one
// transaction with what recorded (may be nil) writes; a failure in between
// resends it under the same Message-ID.
func (s *Service) RideReceiptSend(ctx context.Context, rideID int64, recorded ReceiptRecordedFunc) (bool, error) {
	return s.receiptSend(ctx, ReceiptRide, rideID, recorded, func(ride *dbgen.Ride) (string, string, error) {
		status := RideChargeStatus(ride.ChargeStatus)
		if (status != RideChargeCharged && status != RideChargeCompleted) || ride.StripeChargeID == nil {
			return "", "", &Error{Code: CodeInvalid, Message: fmt.Sprintf("ride %d is not charged", ride.ID)}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Thank you for riding with Atomic Rides.\n\n")
		fmt.Fprintf(&b, "Ride:    %d\n", ride.ID)
		fmt.Fprintf(&b, "Booked:  %s\n", ride.CreatedAt.UTC().Format("2006-01-02 15:04 MST"))
		fmt.Fprintf(&b, "From:    %.6f, %.6f\n", ride.OriginLat, ride.OriginLon)
		fmt.Fprintf(&b, "To:      %.6f, %.6f\n", ride.TargetLat, ride.TargetLon)
		if status == RideChargeCompleted && ride.FareCents != nil {
			writeTripReceipt(&b, ride)
		} else {
			fmt.Fprintf(&b, "Charged: %s\n", formatAmount(ride.AmountCents, ride.Currency))
			fmt.Fprintf(&b, "Charge:  %s\n", *ride.StripeChargeID)
		}
		return fmt.Sprintf("Your receipt for ride %d", ride.ID), b.String(), nil
	})
}

// RefundReceiptSend emails the receipt of a refunded ride, once, like
// RideReceiptSend.
func (s *Service) RefundReceiptSend(ctx context.Context, rideID int64, recorded ReceiptRecordedFunc) (bool, error) {
	return s.receiptSend(ctx, ReceiptRefund, rideID, recorded, func(ride *dbgen.Ride) (string, string, error) {
		refund, err := s.queries.RefundGetByRide(ctx, s.pool, rideID)
		if IsNoRows(err) || (err == nil && (RideRefundStatus(refund.Status) != RideRefundRefunded || refund.StripeRefundID == nil)) {
			return "", "", &Error{Code: CodeInvalid, Message: fmt.Sprintf("ride %d is not refunded", ride.ID)}
		} else if err != nil {
			return "", "", Internal(err)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Your ride has been refunded.\n\n")
		fmt.Fprintf(&b, "Ride:     %d\n", ride.ID)
		fmt.Fprintf(&b, "Refunded: %s\n", formatAmount(refund.AmountCents, refund.Currency))
		fmt.Fprintf(&b, "Refund:   %s\n", *refund.StripeRefundID)
		fmt.Fprintf(&b, "It reaches your card within 5 to 10 business days.\n")
		return fmt.Sprintf("Your refund for ride %d", ride.ID), b.String(), nil
	})
}

// receiptBody builds the subject and text of a receipt, or refuses to.
type receiptBody func(ride *dbgen.Ride) (subject, text string, err error)

func (s *Service) receiptSend(ctx context.Context, kind ReceiptKind, rideID int64, recorded ReceiptRecordedFunc, body receiptBody) (sent bool, err error) {
	defer func() { s.metrics.receipt(kind, sent, err) }()
	if s.mailer == nil {
		return false, Internal(errNoMailer)
	}
	subj, err := s.queries.ReceiptSubject(ctx, s.pool, string(kind), rideID)
	if IsNoRows(err) {
		return false, &Error{Code: CodeNotFound, Message: fmt.Sprintf("no ride %d", rideID)}
	} else if err != nil {
		return false, Internal(err)
	}
	if subj.Sent {
		return false, nil
	}
	subject, text, err := body(&subj.Ride)
	if err != nil {
		return false, err
	}
	msg := Message{
		MessageID: ReceiptMessageID(kind, rideID, s.mailFrom),
		From:      s.mailFrom,
		To:        subj.Email,
		Subject:   subject,
		Date:      s.now(),
		Text:      text,
	}
	if err := s.mailer.Send(ctx, msg); err != nil {
		return false, fmt.Errorf("send %s receipt of ride %d: %w", kind, rideID, err)
	}
	// The message is out: record it even if the job's context ends now.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	// What recorded writes goes first, with the BEGIN; the record goes last,
	// with the COMMIT (commitWith): two round trips.
	err = s.inTx(ctx, pgx.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if recorded != nil {
			if err := recorded(ctx, tx); err != nil {
				return err
			}
		}
		_, err := s.queries.ReceiptRecord(ctx, idem.CommitWith(tx), dbgen.ReceiptRecordParams{
			Kind: string(kind), RideID: rideID, MessageID: msg.MessageID, Recipient: msg.To, SentAt: msg.Date,
		})
		return err
	})
	if err != nil {
		return true, Internal(err)
	}
	return true, nil
}

func formatAmount(cents int64, currency string) string {
	return fmt.Sprintf("%d.%02d %s", cents/100, cents%100, strings.ToUpper(currency))
}
